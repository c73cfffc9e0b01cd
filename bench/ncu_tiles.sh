#!/usr/bin/env bash
# On the GPU machine: ncu's warp-stall and issue profile of a few tile-GEMV
# launches inside the decode step's graph (graph nodes profiled one by one, so
# the overlap between kernels is gone: read stall reasons, not times).
# KERNEL (a regex, gemv_kernel by default), SKIP and COUNT pick the launches.
# Output under $OUT.
set -uo pipefail
source "$(dirname "$0")/prebuilt_env.sh"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
timeout 300 "$NCU" --graph-profiling node -k "regex:${KERNEL:-gemv_kernel}" \
  --launch-skip "${SKIP:-400}" --launch-count "${COUNT:-6}" \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
  --section MemoryWorkloadAnalysis \
  $BIN/tern bench --dummy 35b-a3b --backend cuda --decode 256 --gen 4 --repeat 1 \
  >$OUT/ncu-tiles.txt 2>&1
grep -E "gemv_kernel|Duration|Stall|Issue Slot|Eligible|Warp Cycles|Throughput" $OUT/ncu-tiles.txt | head -120
