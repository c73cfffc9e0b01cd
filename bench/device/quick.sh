#!/usr/bin/env bash
# On the GPU machine, for iterating on kernels: the GPU tests matching FILTER,
# a short decode run at 4K and 128K, and the per-kernel step profile at 4K.
set -uo pipefail
source "$(dirname "$0")/prebuilt_env.sh"
(cd "$SRC" && $PWD/$BIN/test_cuda --gtest_brief=1 --gtest_filter="${FILTER:-*}") 2>&1 | tail -25
$BIN/tern bench --dummy 35b-a3b --backend cuda --decode "${DECODE:-4096,131072}" --gen 64 --repeat 2 \
  --json $OUT/quick.json --rev "$REV" 2>&1 | tail -4
CTX=4096 bash bench/device/profile_step.sh 2>&1 | tail -12
