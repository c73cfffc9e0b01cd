#!/usr/bin/env bash
# One call on the GPU machine: the CUDA tests, then the decode benchmark, logs
# and results under $OUT. Uses binaries built here and carried in bench/prebuilt
# (the GPU machine lacks fmt/spdlog/GoogleTest; bench/prebuilt/lib holds the
# shared libraries they need), so no device time goes to compiling.
# The tests run with TERN_REQUIRE_GPU=1 (a skip is a failure); their exit
# status and counts go into $OUT/summary.txt, which the call prints last and
# which is committed under bench/results/ as tests-summary-<rev>.txt.
# DECODE and GEN override the context lengths and timed tokens; BENCH=0 runs
# the tests only, LEAVE=0 skips the leave-one-out; FILTER is a gtest filter.
set -uo pipefail
source "$(dirname "$0")/prebuilt_env.sh"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used,memory.total --format=csv | tee $OUT/gpu.txt
export TERN_REQUIRE_GPU=1
(cd "$SRC" && $PWD/$BIN/test_cuda --gtest_brief=1 --gtest_filter="${FILTER:-*}" \
  --gtest_output=json:$OUT/tests.json) 2>&1 | tee $OUT/tests.log | tail -60
test_rc=${PIPESTATUS[0]}
python3 bench/device/test_summary.py "$OUT/tests.json" "$test_rc" "$REV" >$OUT/summary.txt
if [ "${BENCH:-1}" = 1 ]; then
  $BIN/tern bench --dummy 35b-a3b --backend cuda \
    --decode "${DECODE:-256,512,1024,2048,4096,8192,16384,32768,65536,131072}" \
    --gen "${GEN:-128}" --repeat 3 --json $OUT/bench.json --plot $OUT/bench.svg \
    --rev "$REV" 2>&1 | tee $OUT/bench.log
fi
# One-step breakdown by leave-one-out at 4K: the step time without each kernel
# (tern bench --leave-out), against the full step; then the sampler at 4K.
if [ "${BENCH:-1}" = 1 ] && [ "${LEAVE:-1}" = 1 ]; then
  for k in none embed gdn_in gdn_step gdn_out qkv attention o_proj route_up down lm_head; do
    L=""; [ "$k" != none ] && L="--leave-out $k"
    echo "$k $($BIN/tern bench --dummy 35b-a3b --backend cuda --decode 4096 --gen 64 --repeat 3 $L 2>&1 |
      awk '$1 == 4096 {print $2, $3}')"
  done | tee $OUT/leave-out-4096.txt
  $BIN/tern bench --dummy 35b-a3b --backend cuda --decode 4096 --gen 64 --repeat 3 --sample \
    --json $OUT/sample-4096.json --rev "$REV" 2>&1 | tail -3
fi
cat $OUT/summary.txt
grep -q ': PASS$' $OUT/summary.txt
