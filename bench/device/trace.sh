#!/usr/bin/env bash
# On the GPU machine: per-block timestamps of two decode steps at CTX (4096 by
# default) from the TERN_TRACE build (bench/device/prepare_device.sh with TRACE=1),
# and their per-kernel summary. Output under $OUT.
set -uo pipefail
source "$(dirname "$0")/prebuilt_env.sh"
CTX=${CTX:-4096}
$BIN/trace/tern bench --dummy 35b-a3b --backend cuda --decode "$CTX" --gen 16 --repeat 1 \
  --trace $OUT/trace-$CTX.csv --rev "$REV" 2>&1 | tail -3
python3 bench/device/trace_summary.py $OUT/trace-$CTX.csv | tee $OUT/trace-$CTX.txt
