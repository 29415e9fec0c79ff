#!/usr/bin/env bash
# One device call (about 6 minutes): install this tree editable, the GPU kernel tests
# (-m gpu), the benchmark (JSON to $OUT/bench.json), the host-cost run (--host, JSON to
# $OUT/host.json), and optional ncu profiles.  Every step logs to $OUT and has its own time
# limit, so one slow step cannot eat the others' time; the exit status is the first failing
# step's.
#   TESTS       pytest -k expression for the GPU tests ("all", the default: every one;
#               "none": skip them); VLLM_CODEMOD_GPU_FULL=1 adds the broad sweeps
#   BENCH_ARGS  extra arguments for bench_paged_attention.py (e.g. "--shapes 1x100K/32-8/128")
#   PROFILES    space-separated shape:config pairs for ncu (config as in
#               profile_partition.py, or "default")
#   TIMELINE    0 skips benchmarks/timeline.py (kernel durations and gaps per shape)
# Usage: OUT=/some/dir bash benchmarks/device_session.sh
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:?set OUT to the folder for logs}
status=0
step() {  # step NAME LIMIT_S COMMAND...: run, log to $OUT/NAME.log, keep the first failure
  local name=$1 limit=$2
  shift 2
  echo "== $name (limit ${limit}s)"
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc"
  [ "$rc" -ne 0 ] && [ "$status" -eq 0 ] && status=$rc
  return 0
}

# The project itself, editable (no dependencies fetched: the device image brings torch
# and triton), so that tests and benchmarks import vllm_codemod.kernels from this tree.
step install 120 python3 -m pip install --no-deps --no-build-isolation -e .
tail -3 "$OUT/install.log"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv \
  | tee "$OUT/gpu.txt"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' \
  | tee -a "$OUT/gpu.txt"

TESTS=${TESTS:-all}
if [ "$TESTS" != none ]; then
  if [ "$TESTS" = all ]; then k=(); else k=(-k "$TESTS"); fi
  step tests 270 python3 -m pytest -q -rs -p no:cacheprovider -m gpu tests/kernels/test_pa_gpu.py \
    ${k[@]+"${k[@]}"}
  tail -15 "$OUT/tests.log"
fi

# shellcheck disable=SC2086
step bench 150 python3 benchmarks/bench_paged_attention.py --json "$OUT/bench.json" \
  ${BENCH_ARGS:-}
grep -v '^{' "$OUT/bench.log" | tail -40
step host 45 python3 benchmarks/bench_paged_attention.py --host --json "$OUT/host.json"
cat "$OUT/host.log"
# Where each shape's time goes in the 20-call graph (kernel durations and gaps).
if [ "${TIMELINE:-1}" != 0 ]; then
  step timeline 60 python3 benchmarks/timeline.py --parts profile --json "$OUT/timeline.json"
  tail -16 "$OUT/timeline.log"
fi

for prof in ${PROFILES:-}; do
  shape=${prof%%:*}; cfg=${prof#*:}
  args=(--shape "$shape"); [ "$cfg" != default ] && args+=(--config "$cfg")
  name="ncu_s${shape}_${cfg//,/_}"
  step "$name" 120 ncu --clock-control none -k regex:_pa_v2_partition --launch-skip 1 \
    --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section WarpStateStats --section MemoryWorkloadAnalysis \
    --section MemoryWorkloadAnalysis_Tables \
    python3 benchmarks/profile_partition.py "${args[@]}"
  grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Stall|Warp Cycles Per Issued" \
    "$OUT/$name.log" | head -20
done
exit "$status"
