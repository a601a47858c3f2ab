"""A mixture-of-experts feed-forward layer trained through kgen: forward and backward in grouped GEMMs.

    python examples/moe_layer.py [--tokens 8192] [--experts 64] [--d-model 2048] [--d-ff 1408]

Tokens are routed to experts (here at random, as a router's top-1 choice), sorted by expert, and
each expert's rows go through its own two weight matrices: ``relu(x @ w1[e]) @ w2[e]``. With
``kgen.gemm_grouped`` every expert's product is one launch, and the group ends stay on the
GPU; autograd runs the backward through ``kgen.torch``: the rows' gradients by the same grouped
GEMM on the transposed weights, the experts' weight gradients by ``kgen.gemm_kgrouped`` (a
reduction over each expert's rows, one launch). The same layer written as a loop of
``torch.matmul`` over the experts (what one writes without a grouped GEMM) gives the reference
result and time; both are checked against each other and timed with CUDA events (median of
``--steps`` steps of forward and backward). Needs a CUDA GPU, PyTorch and kgen.
"""

from __future__ import annotations

import argparse
import statistics

import torch

import kgen
import kgen.torch  # noqa: F401  (registers kgen's operators, with their backward)


def route(tokens: int, experts: int, seed: int = 0):
    """Which expert each token goes to, the order that sorts tokens by expert, and the group ends."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    expert = torch.randint(0, experts, (tokens,), device="cuda", generator=gen)
    order = torch.argsort(expert)
    ends = torch.cumsum(torch.bincount(expert, minlength=experts), 0).to(torch.int32)
    return order, ends


def kgen_layer(x, w1, w2, ends):
    return kgen.gemm_grouped(kgen.gemm_grouped(x, w1, ends, activation="relu"), w2, ends)


def loop_layer(x, w1, w2, ends):
    bounds = [0] + ends.tolist()           # a loop needs the counts on the host: a synchronisation
    pieces = [torch.relu(x[s:e] @ w1[g]) @ w2[g] for g, (s, e) in enumerate(zip(bounds, bounds[1:]))]
    return torch.cat(pieces)


def step(layer, x, w1, w2, ends, dy):
    for w in (w1, w2):
        w.grad = None
    y = layer(x, w1, w2, ends)
    y.backward(dy)
    return y


def timed(layer, args, steps: int) -> float:
    step(layer, *args)                      # warm-up: kernels chosen and loaded
    times = []
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step(layer, *args)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--experts", type=int, default=64)
    ap.add_argument("--d-model", type=int, default=2048)
    ap.add_argument("--d-ff", type=int, default=1408)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    torch.manual_seed(0)
    bf16 = dict(device="cuda", dtype=torch.bfloat16)
    order, ends = route(args.tokens, args.experts)
    x = torch.randn(args.tokens, args.d_model, **bf16)[order]
    w1 = (torch.randn(args.experts, args.d_model, args.d_ff, **bf16) / args.d_model ** 0.5).requires_grad_()
    w2 = (torch.randn(args.experts, args.d_ff, args.d_model, **bf16) / args.d_ff ** 0.5).requires_grad_()
    dy = torch.randn(args.tokens, args.d_model, **bf16)

    y = step(kgen_layer, x, w1, w2, ends, dy).float()
    grads = [w.grad.float() for w in (w1, w2)]
    y_ref = step(loop_layer, x, w1, w2, ends, dy).float()
    errors = [float((a - b).abs().max() / b.abs().max()) for a, b in zip([y, *grads], [y_ref, w1.grad, w2.grad])]
    print(f"{args.tokens} tokens, {args.experts} experts, d_model {args.d_model}, d_ff {args.d_ff} (bf16)")
    print("largest difference from the loop, relative: output {:.2e}, dW1 {:.2e}, dW2 {:.2e}".format(*errors))
    inputs = (x, w1, w2, ends, dy)
    ms_kgen, ms_loop = timed(kgen_layer, inputs, args.steps), timed(loop_layer, inputs, args.steps)
    flops = 3 * 2 * 2.0 * args.tokens * args.d_model * args.d_ff      # two GEMMs, forward and two gradients
    print(f"forward + backward: kgen {ms_kgen:.3f} ms ({flops / ms_kgen / 1e9:.0f} TFLOP/s), "
          f"torch.matmul loop {ms_loop:.3f} ms: {ms_loop / ms_kgen:.2f}x")


if __name__ == "__main__":
    main()
