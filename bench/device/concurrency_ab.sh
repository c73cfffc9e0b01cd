#!/usr/bin/env bash
# Requests at once on the GPU machine, same-call A/B: the GPU tests of the
# carried build (TESTS=0 skips them), then `tern bench --concurrency` from
# each binary named in AB (paths under the carried build holding a tern; "."
# is the carried build itself), alternating ROUNDS times. CONC, DECODE and
# GEN set the streams, contexts and timed tokens. Output under $OUT/ab.txt.
set -uo pipefail
source "$(dirname "$0")/prebuilt_env.sh"
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
if [ "${TESTS:-1}" = 1 ]; then
  (cd "$SRC" && TERN_REQUIRE_GPU=1 $PWD/$BIN/test_cuda --gtest_brief=1) 2>&1 |
    tee $OUT/tests.log | tail -15
fi
for round in $(seq "${ROUNDS:-1}"); do
  for b in ${AB:-.}; do
    echo "== round $round: $b ($(cat $BIN/$b/REV 2>/dev/null || echo "$REV"))"
    $BIN/$b/tern bench --dummy 35b-a3b --backend cuda --concurrency "${CONC:-1,2,4,8,16}" \
      --decode "${DECODE:-4096}" --gen "${GEN:-128}" 2>&1 | grep -v " info "
  done
done | tee $OUT/ab.txt
