#!/usr/bin/env bash
# One device call: GPU tests (selected by $TESTS, a pytest -k expression; "all" = every
# GPU kernel test), the benchmark ($BENCH_ARGS) and ncu profiles ($PROFILES: space-separated
# shape:config pairs, config as in profile_partition.py or "default").  Logs go to $OUT.
set -u
export PYTHONUNBUFFERED=1
# The project itself, editable (no dependencies fetched: the device image brings torch
# and triton), so that tests and benchmarks import vllm_codemod.kernels from this tree.
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
if [ -n "${TESTS:-}" ]; then
  if [ "$TESTS" = all ]; then k=(); else k=(-k "$TESTS"); fi
  python3 -m pytest -q -p no:cacheprovider tests/kernels/test_pa_gpu.py "${k[@]}" 2>&1 \
    | tee "$OUT/tests.log" | tail -5
fi
if [ -n "${BENCH_ARGS:-}" ]; then
  # shellcheck disable=SC2086
  python3 benchmarks/bench_paged_attention.py $BENCH_ARGS 2>&1 | tee "$OUT/bench.log" \
    | grep -v '^{'
fi
for prof in ${PROFILES:-}; do
  shape=${prof%%:*}; cfg=${prof#*:}
  args=(--shape "$shape"); [ "$cfg" != default ] && args+=(--config "$cfg")
  name="ncu_s${shape}_${cfg//,/_}.txt"
  ncu --clock-control none -k regex:_pa_v2_partition --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section WarpStateStats --section MemoryWorkloadAnalysis \
    --section MemoryWorkloadAnalysis_Tables \
    python3 benchmarks/profile_partition.py "${args[@]}" > "$OUT/$name" 2>&1
  echo "== $name"; grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Stall|Warp Cycles Per Issued" "$OUT/$name" | head -20
done
