#!/usr/bin/env bash
# On the GPU machine: ncu's sections (throughput, occupancy, warp stalls,
# instruction mix) for a few launches of each named prefill kernel in a
# PROMPT-token prefill (default 2048), into $OUT/ncu_prefill.txt.
set -uo pipefail
source "$(dirname "$0")/prebuilt_env.sh"
for k in ${KERNELS:-chunk_prep_kernel chunk_state_kernel gemm_kernel}; do
  echo "=== $k"
  ncu --kernel-name "regex:$k" --launch-skip ${SKIP:-12} --launch-count ${COUNT:-2} \
    --cache-control none --clock-control none \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section InstructionStats \
    $BIN/tern bench --dummy 35b-a3b --backend cuda --prefill ${PROMPT:-2048} --repeat 1 2>&1 |
    grep -vE "^\[|^==PROF==|tok/s|copy bandwidth" | sed -e 's/  \+/ /g'
done | tee $OUT/ncu_prefill.txt | grep -E "^===|Duration|Throughput|Achieved Occupancy|Registers|Grid Size|Stall|Issued Ipc|No Eligible|Warp Cycles Per Issued|L2 Hit|DRAM|Executed Ipc" | head -150
