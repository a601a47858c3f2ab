#!/usr/bin/env bash
# Everything that needs the GPU, in one call: install the carried wheels, run every `gpu`
# test, run the benchmarks; logs and results go under $OUT (default ./gpu_out).
#   scripts/gpu_check.sh                 # tests + the full GEMM benchmark
#   scripts/gpu_check.sh tests [FILES]   # tests only (all gpu tests, or these files)
#   scripts/gpu_check.sh bench [ARGS]    # GEMM benchmark only (ARGS go to bench_gemm.py, e.g.
#                                        #   --suite tc-large --timeout 13 --merge --commit SHA; give
#                                        #   the commit: the GPU machine's copy of .git may be stale)
#   scripts/gpu_check.sh dispatch [ARGS] # call overhead and cold start (ARGS go to bench_dispatch.py)
#   scripts/gpu_check.sh launch          # host cost of each piece of a kernel call (launch_costs.py)
#   scripts/gpu_check.sh export [ARGS]   # host cost of an exported tensor-core GEMM call against its raw launch
#                                        #   and kgen.gemm (bench_export.py) -> $OUT/bench_export.json
#   scripts/gpu_check.sh db [ARGS]       # the CPU database benchmark on this host's CPUs (bench_db.py)
#   scripts/gpu_check.sh search ARGS     # the search benchmark on this host's CPUs (bench_search.py; gp
#                                        #   needs the PyTorch this machine has) -> $OUT/bench_search.json
#   scripts/gpu_check.sh record SET N [SECONDS [ARGS]] # ground truth for search studies: N configs per
#                                        #   problem of SET (simt, mma, wgmma; N=0: all), SECONDS at most each
#                                        #   (ARGS: e.g. --shapes) -> $OUT/h200_gemm_SET.jsonl.gz
#   scripts/gpu_check.sh extend SET OLD [ARGS] # OLD (a sampled recording) and what a search meets first: the
#                                        #   model picks' neighbourhoods, live kgen tunes (record_space.py
#                                        #   --extend) -> $OUT/$(basename OLD)
#   scripts/gpu_check.sh ncu CASES       # Nsight Compute counters of named configs (a GEMM shape, or any family's
#                                        #   problem key) and their baselines on the same operands (CASES: see
#                                        #   scripts/profile_gemm.py) -> $OUT/ncu.csv;
#                                        #   NCU_FLAGS replaces the metrics (e.g. "--set full --page details")
#   scripts/gpu_check.sh flush           # the best kernels, cuBLAS and a plain read, after a dirty and
#                                        #   a clean L2 sweep (scripts/bench_flush.py) -> $OUT/bench_flush.json
#   scripts/gpu_check.sh compare ARGS    # named configs timed side by side with cuBLAS (ARGS: see
#                                        #   scripts/compare_configs.py) -> $OUT/compare.jsonl
#   scripts/gpu_check.sh clocks ARGS     # SM clock, power and temperature while each named config and
#                                        #   cuBLAS run for seconds (scripts/clock_probe.py) -> $OUT/clock_probe.jsonl
#   scripts/gpu_check.sh trace ARGS      # the phase marks of named gemm_wgmma configs, per block
#                                        #   (scripts/trace_phases.py) -> $OUT/trace_phases.jsonl
#   scripts/gpu_check.sh memory-tune [TRIALS [SECONDS]] # the memory benchmark's problems (run once, untuned,
#                                        #   -> $OUT/bench_memory_untuned.json) tuned into $OUT/memory.db, each
#                                        #   family's records exported to $OUT/tuning_db/<device>_<family>.jsonl
#   scripts/gpu_check.sh memory-bench [ARGS] # the memory-bound families beside PyTorch, torch.compile and CuPy
#                                        #   (scripts/bench_memory.py; with $OUT/memory.db's records where it
#                                        #   exists) -> $OUT/bench_memory.json
#   scripts/gpu_check.sh conv-tune [TRIALS [SECONDS]] # the conv benchmark's cases (run once, untuned,
#                                        #   -> $OUT/bench_conv_untuned.json) tuned into $OUT/conv.db, records
#                                        #   exported to $OUT/tuning_db/<device>_conv2d.jsonl
#   scripts/gpu_check.sh conv-bench [ARGS] # conv2d beside cuDNN (scripts/bench_conv.py; with $OUT/conv.db's
#                                        #   records where it exists) -> $OUT/bench_conv.json
#   scripts/gpu_check.sh dist [ARGS]     # kgen.dist's GEMM algorithms on the nccl backend (world size 1) beside
#                                        #   kgen.gemm and cuBLAS (scripts/bench_dist.py) -> $OUT/bench_dist.json
#   scripts/gpu_check.sh shapes [ARGS]   # kgen (untuned; tuned: ARGS --modes) and cuBLAS side by side on random
#                                        #   shapes nobody tunes for (scripts/bench_shapes.py) -> $OUT/bench_shapes.json
#   scripts/gpu_check.sh skinny [ARGS]   # gemm_skinny's GPU tests, bench_shapes routed to it (KGEN_SKINNY_MAX=16,
#                                        #   ARGS: e.g. --commit SHA), its study, two tunes whose records go to
#                                        #   $OUT/tuning_db/<device>_gemm_skinny.jsonl; each step time-boxed
#   scripts/gpu_check.sh skinny-study [ARGS] # gemm_skinny's model picks and random configs against measurement, with
#                                        #   the tile families' untuned call and cuBLAS (scripts/study_skinny.py)
#                                        #   -> $OUT/skinny_study.jsonl
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 KGEN_HOME=${KGEN_HOME:-/tmp/kgen-home}
what=${1:-all}; shift || true
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
status=0
logged() {   # logged LOG CMD...: run CMD, its output shown and kept in $OUT/LOG; a failure fails the check
  local log=$1; shift
  "$@" 2>&1 | tee "$OUT/$log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
}
if [ "$what" = all ] || [ "$what" = tests ]; then
  [ "$what" = tests ] && [ $# -gt 0 ] && files=("$@") || files=(tests)
  python3 -m pytest -q -rs -m "gpu or multi_gpu" "${files[@]}" 2>&1 | tee "$OUT/gpu_tests.log"
  status=${PIPESTATUS[0]}
fi
if [ "$what" = all ] || [ "$what" = bench ]; then
  logged bench_gemm.log python3 scripts/bench_gemm.py --out "$OUT/bench_gemm.json" --export "$OUT/tuning_db.jsonl" \
    --recording "$OUT/recording.jsonl" "$@"
fi
if [ "$what" = all ] || [ "$what" = dispatch ]; then
  [ "$what" = dispatch ] && dargs=("$@") || dargs=()
  logged bench_dispatch.log python3 scripts/bench_dispatch.py --out "$OUT/bench_dispatch.json" "${dargs[@]}"
fi
if [ "$what" = launch ]; then
  logged launch_costs.log python3 scripts/launch_costs.py --out "$OUT/launch_costs.json"
fi
if [ "$what" = export ]; then
  logged bench_export.log python3 scripts/bench_export.py --out "$OUT/bench_export.json" "$@"
fi
if [ "$what" = db ]; then
  logged bench_db.log python3 scripts/bench_db.py --out "$OUT/bench_db.json" "$@"
fi
if [ "$what" = record ]; then
  logged "record_$1.log" python3 scripts/record_space.py --set "$1" --configs "${2:-0}" --timeout "${3:-120}" \
    --out "$OUT/h200_gemm_$1.jsonl.gz" "${@:4}"
fi
if [ "$what" = extend ]; then
  logged "extend_$1.log" python3 scripts/record_space.py --set "$1" --extend "$2" --out "$OUT/$(basename "$2")" "${@:3}"
fi
if [ "$what" = flush ]; then
  logged bench_flush.log python3 scripts/bench_flush.py --out "$OUT/bench_flush.json" "$@"
fi
if [ "$what" = ncu ]; then
  metrics=gpu__time_duration.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,sm__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__block_size,sm__warps_active.avg.pct_of_peak_sustained_active
  read -r -a flags <<< "${NCU_FLAGS:---csv --page raw --metrics $metrics}"
  ncu --clock-control none "${flags[@]}" python3 scripts/profile_gemm.py "$@" \
    > "$OUT/ncu.csv" 2> "$OUT/ncu.log"
  [ $? = 0 ] || status=1
  grep -v '^==PROF==' "$OUT/ncu.csv" | cut -c1-400 | tail -n 40
fi
if [ "$what" = compare ]; then
  logged compare.log python3 scripts/compare_configs.py --out "$OUT/compare.jsonl" "$@"
fi
if [ "$what" = search ]; then     # the CPU search benchmark on this host's CPUs (its PyTorch serves gp)
  logged bench_search.log python3 scripts/bench_search.py --out "$OUT/bench_search.json" "$@"
fi
if [ "$what" = trace ]; then
  logged trace_phases.log python3 scripts/trace_phases.py --out "$OUT/trace_phases.jsonl" "$@"
fi
if [ "$what" = clocks ]; then
  logged clock_probe.log python3 scripts/clock_probe.py --out "$OUT/clock_probe.jsonl" "$@"
fi
tune_keys() {   # tune_keys PREFIX DB TRIALS SECONDS: each PREFIX.FAMILY.txt's problems tuned into $OUT/DB, and
                #   each family's records exported to $OUT/tuning_db/<device>_<family>.jsonl
  local prefix=$1 db=$2 trials=$3 seconds=$4 keys family slug
  mkdir -p "$OUT/tuning_db"
  slug=$(python3 -c "from kgen.problem import Target; print(Target.detect(0).slug)")
  for keys in "$prefix".*.txt; do
    family=$(basename "$keys" .txt); family=${family#"$(basename "$prefix")."}
    logged "tune_$family.log" python3 -m kgen.cli tune "$family" --from "$keys" --trials "$trials" \
      --timeout "$seconds" --db "sqlite:///$OUT/$db"
    python3 -m kgen.cli db export --db "sqlite:///$OUT/$db" --family "$family" \
      --output "$OUT/tuning_db/${slug}_$family.jsonl" || status=1
  done
}
if [ "$what" = memory-tune ]; then
  logged bench_memory_untuned.log python3 scripts/bench_memory.py --no-compile --runs 15 \
    --out "$OUT/bench_memory_untuned.json" --keys "$OUT/keys"
  tune_keys "$OUT/keys" memory.db "${1:-24}" "${2:-10}"
fi
if [ "$what" = memory-bench ]; then
  [ -f "$OUT/memory.db" ] && export KGEN_DB_URL="sqlite:///$OUT/memory.db"
  logged bench_memory.log python3 scripts/bench_memory.py --out "$OUT/bench_memory.json" "$@"
fi
if [ "$what" = conv-tune ]; then
  logged bench_conv_untuned.log python3 scripts/bench_conv.py --runs 15 --out "$OUT/bench_conv_untuned.json" \
    --suites "${CONV_TUNE_SUITES:-resnet50-b64,resnet50-b1,odd,epilogue,tf32,bmm}" \
    --keys "$OUT/convkeys"
  tune_keys "$OUT/convkeys" conv.db "${1:-24}" "${2:-20}"
fi
if [ "$what" = conv-bench ]; then
  [ -f "$OUT/conv.db" ] && export KGEN_DB_URL="sqlite:///$OUT/conv.db"
  logged bench_conv.log python3 scripts/bench_conv.py --out "$OUT/bench_conv.json" "$@"
fi
if [ "$what" = dist ]; then
  logged bench_dist.log python3 scripts/bench_dist.py --out "$OUT/bench_dist.json" "$@"
fi
if [ "$what" = shapes ]; then
  logged bench_shapes.log python3 scripts/bench_shapes.py --out "$OUT/bench_shapes.json" "$@"
fi
if [ "$what" = skinny-study ]; then
  logged skinny_study.log python3 scripts/study_skinny.py --out "$OUT/skinny_study.jsonl" "$@"
fi
if [ "$what" = skinny ]; then   # everything gemm_skinny needs from a GPU, each step time-boxed (~8 min in all)
  # time boxes in seconds: SKINNY_TESTS_S, SKINNY_SHAPES_S, SKINNY_STUDY_S (0: no study), SKINNY_TUNE_S (each
  # tune; 0: no tunes); bench_shapes routes every dtype KGEN_SKINNY_DTYPES names (default: all three)
  timeout "${SKINNY_TESTS_S:-180}" python3 -m pytest -q -rfs --tb=short -m gpu tests/test_gpu_gemm_skinny.py 2>&1 \
    | tee "$OUT/gpu_tests.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  KGEN_SKINNY_MAX=16 KGEN_SKINNY_DTYPES=${KGEN_SKINNY_DTYPES:-float32,float16,bfloat16} \
    timeout "${SKINNY_SHAPES_S:-120}" python3 scripts/bench_shapes.py --seed 1 --seed2 auto \
    --modes untuned --out "$OUT/bench_shapes.json" "$@" > "$OUT/bench_shapes.log" 2>&1 || status=1
  if [ "${SKINNY_STUDY_S:-90}" != 0 ]; then
    timeout "${SKINNY_STUDY_S:-90}" python3 scripts/study_skinny.py --count 8 --seed 7 --out "$OUT/skinny_study.jsonl" \
      > "$OUT/skinny_study.log" 2>&1
  fi
  [ "${SKINNY_TUNE_S:-40}" = 0 ] && exit $status
  mkdir -p "$OUT/tuning_db"
  slug=$(python3 -c "from kgen.problem import Target; print(Target.detect(0).slug)")
  for p in "--m 4096 --n 8 --k 4096 --dtype float32 --layout NT" "--m 4 --n 8192 --k 2048 --dtype float32 --layout TN --precision tf32"; do
    # shellcheck disable=SC2086
    timeout "${SKINNY_TUNE_S:-40}" python3 -m kgen.cli tune gemm_skinny $p --trials 10 --db "sqlite:////tmp/kgen-skinny.db" \
      >> "$OUT/tune.log" 2>&1
  done
  python3 -m kgen.cli db export --db "sqlite:////tmp/kgen-skinny.db" --family gemm_skinny \
    --output "$OUT/tuning_db/${slug}_gemm_skinny.jsonl" || status=1
fi
exit $status
