#!/usr/bin/env bash
# Same-call sweep of experiment knobs on the GPU machine: each line of $CONFIGS
# is "binary-folder ENV=VALUE ..." (folder under bench/prebuilt, "." the
# carried build); each config runs `tern bench` at DECODE, ROUNDS times in
# alternation. Output under $OUT/knobs.txt.
set -uo pipefail
source "$(dirname "$0")/prebuilt_env.sh"
for round in $(seq "${ROUNDS:-2}"); do
  while read -r b envs; do
    [ -z "$b" ] && continue
    echo "== round $round: $b $envs"
    env $envs $BIN/$b/tern bench --dummy 35b-a3b --backend cuda --decode "${DECODE:-4096}" \
      --gen "${GEN:-64}" --repeat 2 2>&1 | awk '$1 ~ /^[0-9]+$/'
  done <<<"$CONFIGS"
done | tee $OUT/knobs.txt
