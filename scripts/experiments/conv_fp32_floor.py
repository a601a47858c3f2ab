"""What an exact float32 convolution on the CUDA cores is up against (GPU): for ResNet-50's
layers, cuDNN's float32 conv with TF32 off (channels-last, cudnn.benchmark), cuBLAS float32 on
the same implicit GEMM (im2col(x) of M = N*P*Q rows and R*S*C columns, times w^T; TF32 off),
and kgen.gemm (exact float32, untuned) on that GEMM. cuDNN above the GEMM's FLOP rate means it
computes fewer FLOPs (Winograd, FFT); an implicit-GEMM kernel can at best reach the GEMM's.

    python scripts/experiments/conv_fp32_floor.py [--batch 64] [--runs 20]

Prints one line per layer: microseconds and TFLOP/s (2*M*N*K over the time) of each.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_conv import RESNET50  # noqa: E402
from benchlib import gpu_session, median_ms  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args(argv)
    cupy, torch, kgen, _, flush = gpu_session()
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    for h, w, c, k, r, s, stride, padding in RESNET50:
        n = args.batch
        x = torch.randn(n, c, h, w, device="cuda").to(memory_format=torch.channels_last)
        wt = torch.randn(k, c, r, s, device="cuda").to(memory_format=torch.channels_last)
        y = torch.nn.functional.conv2d(x, wt, None, stride, padding)
        m, gk = y.shape[0] * y.shape[2] * y.shape[3], r * s * c
        flops = 2.0 * m * k * gk
        a = cupy.random.random((m, gk), dtype=cupy.float32)
        b = cupy.random.random((gk, k), dtype=cupy.float32)
        ta, tb = torch.from_dlpack(a), torch.from_dlpack(b)
        out = cupy.empty((m, k), dtype=cupy.float32)
        times = {
            "cudnn": median_ms(lambda: torch.nn.functional.conv2d(x, wt, None, stride, padding), args.runs, flush),
            "cublas_gemm": median_ms(lambda: torch.matmul(ta, tb), args.runs, flush),
            "kgen_gemm": median_ms(lambda: kgen.gemm(a, b, out), args.runs, flush),
        }
        text = ", ".join(f"{name} {t * 1e3:9.1f} us {flops / t / 1e9:6.1f} TF/s" for name, t in times.items())
        print(f"{n}x{h}x{w}x{c}->{k} {r}x{s}/{stride}: GEMM {m}x{k}x{gk}: {text}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
