#!/usr/bin/env bash
# On the GPU machine: instructions a warp and stall reasons (cycles a warp
# spends in each state per issued instruction) of the tile GEMV launches, one
# graph node at a time, and the SASS of the carried tern (sass.txt.gz), under
# $OUT. SKIP and COUNT pick the launches; CACHE the ncu cache control.
set -uo pipefail
source "$(dirname "$0")/prebuilt_env.sh"
cuobjdump -sass $BIN/tern | gzip >$OUT/sass.txt.gz
ncu --kernel-name "regex:${KERNELS:-gemv_kernel}" --launch-skip ${SKIP:-40} --launch-count ${COUNT:-4} \
  --graph-profiling node --cache-control ${CACHE:-none} --clock-control none \
  --section WarpStateStats --section InstructionStats --page raw \
  $BIN/tern bench --dummy 35b-a3b --backend cuda --decode 4096 --gen 2 --repeat 1 2>&1 |
  grep -E "gemv_kernel|issue_stalled.*ratio|inst_executed.sum |gpu__time_duration.sum" |
  sed -e 's/  \+/ /g' | grep -v " 0$" | tee $OUT/ncu_stall.txt
