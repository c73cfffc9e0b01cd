#!/usr/bin/env bash
# Stall reasons (incl. no_instruction: i-cache misses) of tile GEMV launches, and their SASS.
source bench/prebuilt_env.sh
which nvdisasm cuobjdump ncu
cuobjdump -sass bench/prebuilt/tern 2>/dev/null | gzip > $OUT/sass.txt.gz; ls -la $OUT
for cc in all none; do
echo "=== cache-control $cc"
timeout 200 ncu --kernel-name regex:gemv_kernel --launch-skip ${SKIP:-40} --launch-count 4 --graph-profiling node \
  --cache-control $cc --clock-control none --section WarpStateStats --section InstructionStats --page raw \
  $BIN/tern bench --dummy 35b-a3b --backend cuda --decode 4096 --gen 2 --repeat 1 2>&1 |
  grep -E "gemv_kernel|issue_stalled.*ratio|inst_executed.sum |gpu__time_duration.sum|smsp__pcsamp_warps_issue_stalled" | sed -e 's/  \+/ /g' | grep -v " 0$\| 0,0" | cut -c1-160
done
