#!/usr/bin/env bash
# bench/serve_clients.mjs on the GPU machine (issue 44's serving benchmark: N
# clients each holding a multi-turn conversation through `tern serve --backend
# cuda`). The machine has no node, so the call carries one: here,
#   TOKENIZER=1 DEST=bench/prebuilt-clients bench/device/prepare_device.sh
#   bench/device/clients_device.sh --pack
# adds node (one self-contained binary) to that folder and compresses it and
# the tokenizer (xz), so that the call's carry stays under 64 MiB; there,
#   PREBUILT=bench/prebuilt-clients bench/device/clients_device.sh [serve_clients flags]
# with bench/prebuilt-clients carried. The JSON and log go under $OUT.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${1:-}" = --pack ]; then
  D=${PREBUILT:-bench/prebuilt-clients}
  xz -T0 -6 -c "$(readlink -f "$(command -v node)")" >$D/node.xz
  xz -T0 -6 -f $D/tokenizer/tokenizer.json
  du -sh $D
  exit 0
fi
source bench/device/prebuilt_env.sh
xz -dc $BIN/node.xz >$BIN/node && chmod +x $BIN/node
xz -dkf $BIN/tokenizer/tokenizer.json.xz
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
echo "tern $REV"
$BIN/node bench/serve_clients.mjs --tern $BIN/tern --dummy 35b-a3b --tokenizer $BIN/tokenizer \
  --backend cuda --json $OUT/clients-cuda.json "$@" 2>&1 | tee $OUT/clients-cuda.txt
