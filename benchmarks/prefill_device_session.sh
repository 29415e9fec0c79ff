#!/usr/bin/env bash
# The prefix-prefill GPU work of one session, as few device calls as the limits allow.
# Each step logs to $OUT/<step>.log (a step run in a loop: <step>-<run>.log for each run)
# under its own time limit; the exit status is the first failing step's.  Pick the steps
# of one call with STEPS (default: all, about 14 minutes: more than one 10-minute call,
# so split it):
#   install        this tree editable; with WHEELS=DIR also the CLI's dependencies from
#                  wheels carried in DIR (the device images have no libcst; without it
#                  `apply` exits 2 and the tune and fork tests fail), and pytest-xdist
#                  where DIR has it: the test steps then run WORKERS (default 8) processes,
#                  since they are bound by Triton's compiles on the CPU, not by the GPU
#   gpu-suite      the README's GPU command, `pytest -q -m gpu` over tests/: every GPU test
#                  in one run (the three steps below together)
#   prefill-tests  tests/kernels/test_prefill_gpu.py (202-316 s in one process on H100s, s20-21)
#   cli-tests      -m gpu tests/test_tune_triton.py tests/kernels/test_forward_prefix_fork.py
#   decode-tests   -m gpu tests/kernels/test_pa_gpu.py (selfcheck runs the prefill cases)
#   tune           benchmarks/tune_session.sh (the corex-0.8.3 fixture, prefill configs
#                  included); its file lands in $OUT/tuning.json (ship it as kernels/tuning-<device>.json)
#   bench          bench_prefix_prefill.py, every case, baselines and the headline
#                  (BENCH_ARGS adds e.g. --config 128,128,8,3 or --dtype float16)
#   fp8            the quick cases over bf16 and fp8 caches, at the default, (128,32,4,1)
#                  and (128,128,8,3), each paged and gathered (session 15's fp8 loop,
#                  untimed; does an fp8 cache gathered to 16 bits run at bf16's speed?)
#   batch          the 8 x (1K + 512) batch at five gathered configs, each also with the
#                  grid ordered query tile slowest (--m-last: the last wave's tail)
#   window         the quick cases at the launcher's configs: no window; a window of each
#                  sequence's length (`seq`: the window path doing the plain path's work);
#                  one wider than the block table (launched as no window); 4096 tokens.
#                  Each run's rows land in $OUT/window-<w>.json, its log in window-<w>.log
#   short          1 sequence at 1K-8K contexts, (128,128,8,3) paged and gathered: where
#                  gathering stops paying (session 15's tune: 207 against 72 us at 1K+512)
#   variants       the quick cases at the launcher's configs in bf16, fp16 and bf16 with
#                  ALiBi, one after the other (the fp16 and ALiBi targets compare each
#                  with the bf16 run of the same call); rows in $OUT/variants-<v>.json
# The run tool brings back at most 8 files from $OUT, so when $OUT was empty at the start,
# as the device's is, the steps write into a staging folder and $OUT holds one file,
# session.tar.gz (unpack it with `tar xzf`), rewritten after every step: a call cut off
# by the run tool's limit still brings back every step that finished.  BUNDLE=1 packs a
# folder that held files (they move into the archive), BUNDLE=0 never packs.
# Usage: OUT=/some/dir STEPS="install prefill-tests bench" bash benchmarks/prefill_device_session.sh
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:?set OUT to the folder for logs}
mkdir -p "$OUT" || exit 2
[ -z "$(ls -A "$OUT" 2>/dev/null)" ] && BUNDLE=${BUNDLE:-1}
ARCHIVE=
pack() {  # the staging folder, as it is now, into $ARCHIVE (replaced whole, never half-written)
  [ -n "$ARCHIVE" ] && [ -n "$(ls -A "$OUT")" ] || return 0
  tar -C "$OUT" -czf "$ARCHIVE.part" . && mv -f "$ARCHIVE.part" "$ARCHIVE"
}
if [ "${BUNDLE:-0}" = 1 ]; then
  ARCHIVE="$OUT/session.tar.gz"
  stage=$(mktemp -d) || exit 2
  find "$OUT" -mindepth 1 -maxdepth 1 -exec mv {} "$stage/" \;
  OUT=$stage  # what the steps (and the tools they run) write goes here
  pack
fi
STEPS=" ${STEPS:-install gpu-suite tune bench fp8 batch window short} "
status=0
step() {  # [LOG=FILE_STEM] step NAME LIMIT_S COMMAND...  (a step run in a loop names its log)
  local name=$1 limit=$2 log="$OUT/${LOG:-$1}.log"
  shift 2
  case "$STEPS" in *" $name "*) ;; *) return 0 ;; esac
  echo "== $name (limit ${limit}s)"
  timeout "$limit" "$@" > "$log" 2>&1
  local rc=$?
  echo "== $name: exit $rc"
  tail -6 "$log"
  [ "$rc" -ne 0 ] && [ "$status" -eq 0 ] && status=$rc
  pack
  return 0
}
install() {
  if [ -n "${WHEELS:-}" ]; then
    python3 -m pip install -q --no-index --find-links "$WHEELS" libcst click packaging \
      ruamel.yaml pyyaml || return 1
    python3 -m pip install -q --no-index --find-links "$WHEELS" pytest-xdist \
      || echo "install: no pytest-xdist from $WHEELS; the tests run in one process"
  fi
  python3 -m pip install -q --no-deps --no-build-isolation -e .
}

export -f install  # `timeout` runs programs, not shell functions
step install 120 bash -c install
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
# Worker processes for the test steps (none without pytest-xdist).  The tests check
# results, never timings, so sharing the GPU cannot change what they assert.
PAR=()
python3 -c "import xdist" 2>/dev/null && PAR=(-n "${WORKERS:-8}")
echo "pytest workers: ${PAR[*]:-none}"
PYTEST=(python3 -m pytest -q -rs -p no:cacheprovider ${PAR[@]+"${PAR[@]}"})
step gpu-suite 540 "${PYTEST[@]}" -m gpu tests
step prefill-tests 450 "${PYTEST[@]}" tests/kernels/test_prefill_gpu.py
step cli-tests 300 "${PYTEST[@]}" -m gpu tests/test_tune_triton.py \
  tests/kernels/test_forward_prefix_fork.py
step decode-tests 270 "${PYTEST[@]}" -m gpu tests/kernels/test_pa_gpu.py
step tune $(( ${BUDGET:-200} + 100 )) env OUT="$OUT" BUDGET="${BUDGET:-200}" bash benchmarks/tune_session.sh
# shellcheck disable=SC2086
step bench 420 python3 benchmarks/bench_prefix_prefill.py --json "$OUT/prefill.json" ${BENCH_ARGS:-}
for kv in auto fp8; do
  # shellcheck disable=SC2086
  LOG=fp8-$kv step fp8 200 python3 benchmarks/bench_prefix_prefill.py --quick --no-baselines --no-headline \
    --kv-cache-dtype $kv --gather --config 128,32,4,1 --config 128,128,8,3 --json "$OUT/fp8-$kv.json"
done
step batch 150 python3 benchmarks/bench_prefix_prefill.py --no-baselines --no-headline \
  --only "8x(1K+512) 32/8/128" --m-last --config 128,128,8,2 --config 128,128,8,3 \
  --config 128,64,4,3 --config 64,64,4,3 --config 64,32,4,3 --json "$OUT/batch.json"
for w in 0 seq 131072 4096; do
  LOG=window-$w step window 150 python3 benchmarks/bench_prefix_prefill.py --quick --no-baselines \
    --no-headline --window $w --json "$OUT/window-$w.json"
done
step short 180 python3 benchmarks/bench_prefix_prefill.py --no-baselines --no-headline --gather \
  --config 128,128,8,3 --only "8x(1K+512) 32/8/128" --case 1,1024,512,32,8,128 --case 1,2048,1024,32,8,128 \
  --case 1,4096,1024,32,8,128 --case 1,8192,2048,32,8,128 --host --json "$OUT/short.json"
for v in bf16 fp16 alibi; do
  case $v in bf16) extra=() ;; fp16) extra=(--dtype float16) ;; alibi) extra=(--alibi) ;; esac
  LOG=variants-$v step variants 150 python3 benchmarks/bench_prefix_prefill.py --quick --no-baselines \
    --no-headline ${extra[@]+"${extra[@]}"} --json "$OUT/variants-$v.json"
done
if [ -n "$ARCHIVE" ]; then
  pack && [ -f "$ARCHIVE" ] && echo "packed into $ARCHIVE"
  rm -rf "$stage"
fi
exit $status
