#!/usr/bin/env bash
# Same-call prefill A/B on the GPU machine: the carried build's GPU tests
# (FILTER, default *Prefill*; "none" skips them), then `tern bench --prefill`
# at PREFILL from BASE (another carried folder, e.g. bench/prebuilt-base: its
# tern and REV are enough, the libraries come from bench/prebuilt) and from
# this build, alternating ROUNDS times so drift does not decide the
# comparison, with each binary's mean tok/s per length; then this build's MoE
# tile widths MOE_BN at BN_PREFILL and its split at SPLIT. Output under $OUT.
set -uo pipefail
source "$(dirname "$0")/prebuilt_env.sh"
B="bench --dummy 35b-a3b --backend cuda"
rows() { awk '$1 ~ /^[0-9]+$/'; }
if [ "${FILTER:-*Prefill*}" != none ]; then
  (cd "$SRC" && timeout "${TESTS_S:-200}" $PWD/$BIN/test_cuda --gtest_brief=1 \
    --gtest_filter="${FILTER:-*Prefill*}") >$OUT/tests.log 2>&1
  echo "tests exit $?"
  grep -E '^\[  (PASSED|FAILED) |tests? from .* ran' $OUT/tests.log | tail -12
fi
for round in $(seq "${ROUNDS:-2}"); do
  for b in ${BASE:-} $BIN; do
    echo "== round $round: $b $(head -1 $b/REV)"
    timeout 90 $b/tern $B --prefill "${PREFILL:-256,512,1024,2048,4096}" --repeat 3 2>&1 | rows
  done
done | tee $OUT/ab.txt
awk '/^== round/ {b = $4 " " $5} $1 ~ /^[0-9]+$/ {s[b " " $1] += $2; n[b " " $1]++}
  END {for (k in s) printf "mean %s %.0f\n", k, s[k] / n[k]}' $OUT/ab.txt | sort -k4n -k2 |
  tee -a $OUT/ab.txt
for bn in ${MOE_BN:-}; do
  echo "moe-bn $bn:"
  timeout 60 $BIN/tern $B --prefill "${BN_PREFILL:-1024,2048,4096,8192}" --moe-bn $bn \
    --repeat 3 2>&1 | rows
done | tee $OUT/moe-bn.txt
if [ -n "${SPLIT:-}" ]; then
  timeout 60 $BIN/tern $B --prefill "$SPLIT" --repeat 1 --split >$OUT/split.log 2>&1
  grep -E 'split at|by kernel' $OUT/split.log | cut -c1-420
fi
