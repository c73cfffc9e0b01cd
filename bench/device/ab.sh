#!/usr/bin/env bash
# Same-call A/B on the GPU machine: the GPU tests of the carried build, then
# `tern bench` from each binary named in AB (folders under bench/prebuilt that
# hold a `tern`; "." is the carried build itself), alternating ROUNDS times so
# drift between calls does not decide the comparison. Output under $OUT/ab.txt.
set -uo pipefail
source "$(dirname "$0")/prebuilt_env.sh"
(cd "$SRC" && $PWD/$BIN/test_cuda --gtest_brief=1 --gtest_filter="${FILTER:-*}") 2>&1 |
  tee $OUT/tests.log | tail -25
for round in $(seq "${ROUNDS:-2}"); do
  for b in ${AB:-.}; do
    echo "== round $round: $b ($(cat $BIN/$b/REV 2>/dev/null || echo "$REV"))"
    $BIN/$b/tern bench --dummy 35b-a3b --backend cuda --decode "${DECODE:-4096,131072}" \
      --gen "${GEN:-64}" --repeat 2 2>&1 | awk '$1 ~ /^[0-9]+$/'
  done
done | tee $OUT/ab.txt
# Each binary's mean tok/s per context over the rounds.
awk '/^== round/ {b = $4 " " $5} $1 ~ /^[0-9]+$/ {s[b " " $1] += $2; n[b " " $1]++}
  END {for (k in s) printf "mean %s %.1f\n", k, s[k] / n[k]}' $OUT/ab.txt | sort | tee -a $OUT/ab.txt
# LEAVE: kernel names for a leave-one-out breakdown of the carried build at 4K.
for k in ${LEAVE:-}; do
  L=""; [ "$k" != none ] && L="--leave-out $k"
  echo "$k $($BIN/tern bench --dummy 35b-a3b --backend cuda --decode 4096 --gen 64 --repeat 3 $L 2>&1 |
    awk '$1 == 4096 {print $2, $3}')"
done | tee $OUT/leave-out-4096.txt
