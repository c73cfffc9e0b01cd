#!/usr/bin/env bash
# On the GPU machine: ncu's detailed sections (throughput, occupancy, warp
# stalls) for one launch of each named decode kernel, into $OUT/ncu_detail.txt.
set -uo pipefail
source "$(dirname "$0")/prebuilt_env.sh"
for k in ${KERNELS:-gemv_kernel router_kernel gdn_step_kernel}; do
  ncu --kernel-name "regex:$k" --launch-skip ${SKIP:-40} --launch-count 1 --graph-profiling node \
    --cache-control none --clock-control none \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis \
    $BIN/tern bench --dummy 35b-a3b --backend cuda --decode 4096 --gen 2 --repeat 1 --json /tmp/p.json 2>&1 |
    grep -vE "^\[|^==PROF==|tok/s|context|copy bandwidth" | sed -e 's/  \+/ /g'
done | tee $OUT/ncu_detail.txt | grep -E "Duration|Throughput|Achieved Occupancy|Registers|Block Size|Grid Size|Waves|Stall|Issued Ipc|No Eligible|Warp Cycles|L2 Hit|DRAM" | head -120
