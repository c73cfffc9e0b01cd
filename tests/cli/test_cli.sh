#!/usr/bin/env bash
# End-to-end checks of the tern command line: the main job on a tiny dummy, and
# clear errors (exit 1, a message naming the problem, no crash) on bad input.
set -u
TERN="$1"
TOK="$2"  # the Qwen3 tokenizer files (npm, scripts/setup.sh)
[ -f "$TOK/tokenizer.json" ] || { echo "no tokenizer.json in '$TOK'"; exit 1; }
GOLDEN="$(cd "$(dirname "$0")/../data/golden" && pwd)"
W="$(mktemp -d)"
trap 'rm -rf "$W"' EXIT
pass=0
fail=0

ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

# expect_error "what" "text in stderr" cmd...: exit code 1 (RC=n: n) and the text on stderr.
expect_error() {
  local what="$1" text="$2" want="${RC:-1}"
  shift 2
  "$@" >"$W/out" 2>"$W/err"
  local rc=$?
  if [ $rc -ne "$want" ]; then bad "$what: exit code $rc (want $want)"; cat "$W/err"; return; fi
  if ! grep -qF -- "$text" "$W/err"; then bad "$what: stderr lacks '$text'"; cat "$W/err"; return; fi
  ok
}

# The main job: a tiny dummy and a greedy completion streamed from it.
"$TERN" make-dummy --preset tiny --layout mlx4 --seed 3 --out "$W/tiny" 2>/dev/null || bad "make-dummy"
"$TERN" run --model "$W/tiny" --prompt-ids 1,2,3 --max-tokens 8 --ignore-eos >"$W/run" 2>"$W/run.err" || bad "run"
[ "$(wc -w <"$W/run")" -eq 8 ] && ok || bad "run printed $(cat "$W/run")"
grep -q "tok/s" "$W/run.err" && ok || bad "run reports no speed"
# Greedy is deterministic; sampling with a seed is repeatable.
"$TERN" run --model "$W/tiny" --prompt-ids 1,2,3 --max-tokens 8 --ignore-eos >"$W/run2" 2>/dev/null
cmp -s "$W/run" "$W/run2" && ok || bad "greedy runs differ"
for i in 1 2; do
  "$TERN" run --model "$W/tiny" --prompt-ids 1,2,3 --max-tokens 8 --ignore-eos --temperature 0.8 \
    --top-k 20 --top-p 0.9 --min-p 0.01 --repetition-penalty 1.1 --seed 42 >"$W/s$i" 2>/dev/null
done
cmp -s "$W/s1" "$W/s2" && ok || bad "seeded sampling not repeatable"

# Text in, text out, with the Qwen3 tokenizer copied into the checkpoint.
"$TERN" make-dummy --preset tiny --seed 3 --out "$W/tok" --tokenizer "$TOK" 2>/dev/null || bad "make-dummy --tokenizer"
"$TERN" run --model "$W/tok" --prompt "Hello, world" --max-tokens 6 --ignore-eos >"$W/text" 2>"$W/text.err" && ok || bad "run --prompt"
grep -q "prompt: 3 tokens" "$W/text.err" && ok || bad "prompt not tokenized to 3 ids: $(cat "$W/text.err")"
"$TERN" run --model "$W/tok" --prompt "Hi" --chat --no-thinking --max-tokens 2 --ignore-eos >/dev/null 2>"$W/chat.err" && ok || bad "run --chat"
grep -q "prompt: 13 tokens" "$W/chat.err" && ok || bad "chat prompt length: $(cat "$W/chat.err")"
expect_error "text without tokenizer" "has no tokenizer.json" "$TERN" run --model "$W/tiny" --prompt "Hello"
expect_error "both prompts" "exactly one of" "$TERN" run --model "$W/tok" --prompt "Hello" --prompt-ids 1

# Constrained completions (--json-schema, --grammar): the random weights choose, the grammar decides.
echo '{"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9}},
  "required": ["n"], "additionalProperties": false}' >"$W/schema.json"
"$TERN" run --model "$W/tok" --prompt "Hi" --chat --no-thinking --json-schema "$W/schema.json" \
  --temperature 1 --seed 2 --max-tokens 100 >"$W/js" 2>"$W/js.err" && ok || bad "run --json-schema"
python3 -c "import json, sys; v = json.load(open(sys.argv[1])); assert list(v) == ['n'] and 1 <= v['n'] <= 9, v" \
  "$W/js" && ok || bad "constrained answer: $(cat "$W/js")"
grep -q "grammar: complete" "$W/js.err" && ok || bad "constrained answer not complete: $(cat "$W/js.err")"
echo 'root ::= "yes" | "no"' >"$W/yn.gbnf"
"$TERN" run --model "$W/tok" --prompt "Hi" --grammar "$W/yn.gbnf" --max-tokens 8 >"$W/yn" 2>/dev/null
grep -qxE "yes|no" "$W/yn" && ok || bad "run --grammar printed $(cat "$W/yn")"
echo '{"type": "string", "not": {"const": ""}}' >"$W/bad.json"
expect_error "unsupported schema keyword" "unsupported keyword 'not' at #" "$TERN" run --model "$W/tok" --prompt "Hi" --json-schema "$W/bad.json"
printf 'root ::= item+\nitem ::= ( "b"\n' >"$W/bad.gbnf"
expect_error "bad GBNF" "GBNF line 3 column 1: expected ')' closing the '(' at line 2 column 10" "$TERN" run --model "$W/tok" --prompt "Hi" --grammar "$W/bad.gbnf"
expect_error "two constraints" "at most one of --json-schema and --grammar" "$TERN" run --model "$W/tok" --prompt "Hi" --grammar "$W/yn.gbnf" --json-schema "$W/schema.json"
expect_error "constraint without tokenizer" "--json-schema and --grammar need it" "$TERN" run --model "$W/tiny" --prompt-ids 1 --grammar "$W/yn.gbnf"

# score against the transformers fixture prints the agreement line: the
# reference at its bound, the fast default at the int8 one (tests/fast_bound.h).
python3 -c "import json,sys; json.dump(json.load(open('$GOLDEN/tokens.json'))[1], open('$W/t.json','w'))"
"$TERN" score --model "$GOLDEN/mlx4" --backend cpu-ref --tokens "$W/t.json" --out "$W/l.npy" \
  --chunk 7 --reference "$GOLDEN/logits_q4_1.npy" >"$W/score" 2>/dev/null || bad "score"
python3 - "$W/score" <<'PY' && ok || bad "score report"
import json, sys
r = json.loads(open(sys.argv[1]).read())
assert set(r) == {"positions", "top1_agreement", "mean_kl", "max_abs_diff", "ppl", "ppl_reference", "ppl_ratio"}, r
assert r["positions"] == 40 and r["top1_agreement"] == 1.0 and r["max_abs_diff"] < 1e-3, r
assert abs(r["ppl_ratio"] - 1) < 1e-4, r
PY
"$TERN" score --model "$GOLDEN/mlx4" --tokens "$W/t.json" --out "$W/l.npy" --chunk 7 \
  --reference "$GOLDEN/logits_q4_1.npy" >"$W/score" 2>/dev/null || bad "score (fast)"
python3 - "$W/score" <<'PY' && ok || bad "score report (fast)"
import json, sys
r = json.loads(open(sys.argv[1]).read())
assert r["positions"] == 40 and r["top1_agreement"] >= 0.9 and r["mean_kl"] < 0.005, r
assert 1e-4 < r["max_abs_diff"] < 0.12 * 12.4, r  # int8 taken; 12% of the fixture's max |logit|
PY

# Bad input.
expect_error "missing model" "does not exist" "$TERN" run --model "$W/nope" --prompt-ids 1
expect_error "no prompt" "exactly one of --prompt and --prompt-ids" "$TERN" run --model "$W/tiny"
expect_error "token out of range" "outside the vocabulary" "$TERN" run --model "$W/tiny" --prompt-ids 1,99999
echo '[1, 2' >"$W/bad.json"
expect_error "malformed tokens" "invalid JSON" "$TERN" score --model "$W/tiny" --tokens "$W/bad.json" --out "$W/x.npy"
echo '[1, "a"]' >"$W/bad.json"
expect_error "wrong token type" "non-negative integers" "$TERN" score --model "$W/tiny" --tokens "$W/bad.json" --out "$W/x.npy"
echo '[1, 2]' >"$W/ok.json"
expect_error "reference shape" "reference logits have shape" "$TERN" score --model "$W/tiny" --tokens "$W/ok.json" --out "$W/x.npy" --reference "$GOLDEN/logits_q4_0.npy"
expect_error "bf16 from 4-bit" "needs a bf16 checkpoint" "$TERN" score --model "$W/tiny" --weights bf16 --tokens "$W/ok.json" --out "$W/x.npy"
expect_error "bad sampling" "top_p" "$TERN" run --model "$W/tiny" --prompt-ids 1 --temperature 1 --top-p 0
cp -r "$W/tiny" "$W/broken" && echo '{"text_config": {}}' >"$W/broken/config.json"
expect_error "empty config" "missing field 'hidden_size'" "$TERN" run --model "$W/broken" --prompt-ids 1
head -c 1000 "$W/tiny/model.safetensors" >"$W/broken/model.safetensors" && cp "$W/tiny/config.json" "$W/broken/"
expect_error "truncated weights" "model.safetensors" "$TERN" run --model "$W/broken" --prompt-ids 1
expect_error "unknown kernel to leave out" "unknown step kernel 'bogus'" "$TERN" bench --dummy tiny --leave-out lm_head,bogus
expect_error "leave-out off the GPU" "--leave-out is for the CUDA backend" "$TERN" bench --model "$W/tiny" --backend cpu --concurrency 1 --decode 8 --leave-out lm_head
expect_error "convert of 4-bit" "reads Hugging Face bf16" "$TERN" convert --in "$W/tiny" --out "$W/c"
expect_error "bad context length" "--decode: 'x' is not a positive context length" "$TERN" bench --dummy tiny --decode 4096,x
# Exit 105: CLI11's own validation, which refuses the flag before anything runs.
RC=105 expect_error "plot extension" "plot file '$W/p.jpg' must end in .svg or .png" "$TERN" bench --dummy tiny --plot "$W/p.jpg"
# tern bench on the CPU: prompt and decode rows, the copy bandwidth, the plot.
"$TERN" bench --model "$W/tiny" --backend cpu --prefill 8,16 --decode 4 --gen 2 --repeat 1 --split \
  --json "$W/bench.json" --plot "$W/bench.svg" >"$W/bench.out" 2>/dev/null || bad "bench --backend cpu"
python3 - "$W/bench.json" <<'PY' && ok || bad "bench JSON"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["backend"] == "cpu" and j["copy_bandwidth_gb_s"] > 0 and j["weight_bytes_per_token"] > 0, j
assert [r["tokens"] for r in j["prefill"]] == [8, 16] and all(r["tok_s"] > 0 for r in j["prefill"]), j
d = j["decode"]
assert [r["context"] for r in d] == [4] and d[0]["tok_s"] > 0 and 0 < d[0]["fraction_of_floor"], j
# --split: the token's parts, each timed, adding up to no more than the whole.
s = d[0]["split"]
parts = [s[p] for p in ("norm", "gdn", "attention", "moe", "head")]
assert all(p > 0 for p in parts) and sum(parts) <= s["whole_ms"] * 1.0001, s
PY
grep -q "<svg" "$W/bench.svg" && ok || bad "bench --plot on the CPU"
# tern bench --concurrency: requests decoding at once through the scheduler
# (enough tokens that all 3 still decode together when a loaded machine
# delays a submit by tens of milliseconds).
"$TERN" bench --model "$W/tiny" --backend cpu --concurrency 1,3 --decode 40 --gen 200 \
  --json "$W/concurrency.json" >"$W/concurrency.log" 2>&1 ||
  { tail -3 "$W/concurrency.log"; bad "bench --concurrency"; }
python3 - "$W/concurrency.json" <<'PY' && ok || bad "bench --concurrency JSON"
import json, sys
r = json.load(open(sys.argv[1]))["concurrency"]
assert [x["streams"] for x in r] == [1, 3], r
assert all(x["tok_s_aggregate"] > 0 and x["tokens_measured"] > 0 and x["ttft_new_ms"] > 0 for x in r), r
PY
# tern bench --restore: prefill against loading from the disk cache (the repeat's tokens equal).
"$TERN" bench --model "$W/tiny" --backend cpu --restore 100 --repeat 1 --cache-dir "$W" \
  --json "$W/restore.json" >/dev/null 2>&1 || bad "bench --restore"
python3 - "$W/restore.json" <<'PY' && ok || bad "bench --restore JSON"
import json, sys
r = json.load(open(sys.argv[1]))["restore"]
assert [x["tokens"] for x in r] == [100] and r[0]["load_seconds"] > 0 and r[0]["disk_bytes"] > 0, r
PY
[ -z "$(ls -d "$W"/tern-restore-bench-* 2>/dev/null)" ] && ok || bad "bench --restore left its directory"
# --isa: every row on the portable table (also ARM's) and on the one picked above, in turn.
ISA=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["isa"])' "$W/bench.json")
"$TERN" bench --model "$W/tiny" --backend cpu --isa "portable,$ISA" --prefill 8 --decode 4 --gen 2 \
  --repeat 1 --json "$W/isa.json" >/dev/null 2>&1 || bad "bench --isa"
python3 - "$W/isa.json" "$ISA" <<'PY' && ok || bad "bench --isa JSON"
import json, sys
j, isa = json.load(open(sys.argv[1])), sys.argv[2]
assert j["isa"] == "portable," + isa, j["isa"]
for rows in (j["prefill"], j["decode"]):
    assert [r["isa"] for r in rows] == ["portable", isa] and all(r["tok_s"] > 0 for r in rows), rows
PY
expect_error "bench --isa unknown" "bogus is not an instruction set" "$TERN" bench --model "$W/tiny" --backend cpu --isa bogus --decode 4
expect_error "bench dummy on the CPU" "pass --model DIR" "$TERN" bench --dummy tiny --backend cpu --decode 8
expect_error "split without decode" "times decode's parts" "$TERN" bench --model "$W/tiny" --backend cpu --prefill 8 --split
# Without a GPU (CI), the CUDA backend says so (or that it is not built) instead of a runtime error.
if ! command -v nvidia-smi >/dev/null; then
  expect_error "no GPU" "CUDA backend" "$TERN" run --model "$W/tiny" --backend cuda --prompt-ids 1
fi

# The disk cache: tern chat writes its sessions (default directory under XDG_CACHE_HOME, 0700),
# and a second chat on the same conversation loads them; tern cache lists, verifies, clears.
D="$W/xdg/tern/sessions"
printf 'Hello there\n' | XDG_CACHE_HOME="$W/xdg" "$TERN" chat --model "$W/tok" --temperature 0 \
  --max-tokens 4 --cache-disk 64M >"$W/chat1" 2>"$W/chat1.err" && ok || bad "chat --cache-disk: $(cat "$W/chat1.err")"
[ "$(stat -c %a "$D")" = 700 ] && ok || bad "the default cache directory is not 0700"
printf 'Hello there\n' | "$TERN" chat --model "$W/tok" --temperature 0 --max-tokens 4 \
  --cache-dir "$D" >"$W/chat2" 2>/dev/null || bad "chat --cache-dir"
grep -q "0 cached" "$W/chat1" && grep -qE "[1-9][0-9]* cached" "$W/chat2" && ok || bad "the second chat loaded nothing: $(cat "$W/chat2")"
[ "$(head -c 40 "$W/chat1")" = "$(head -c 40 "$W/chat2")" ] && ok || bad "the answers differ"
"$TERN" cache list --cache-dir "$D" >"$W/list" 2>&1 && ok || bad "cache list"
grep -qE "^[0-9a-f]{16}\.kv +kv +0-[0-9]+" "$W/list" && grep -q "restorable prefixes" "$W/list" && grep -q "numerics cpu" "$W/list" \
  && ok || bad "cache list output: $(cat "$W/list")"
"$TERN" cache verify --cache-dir "$D" >"$W/verify" && ok || bad "cache verify of an intact cache: $(cat "$W/verify")"
STATE="$(ls "$D"/*.state | head -1)"
printf 'X' | dd of="$STATE" bs=1 seek=$(($(stat -c %s "$STATE") - 1)) conv=notrunc 2>/dev/null
"$TERN" cache verify --cache-dir "$D" >"$W/verify" && bad "verify passed a damaged entry" || ok
grep -q "$(basename "$STATE"): damaged (its checksum does not match)" "$W/verify" && ok || bad "verify names the damage: $(cat "$W/verify")"
"$TERN" cache verify --cache-dir "$D" --remove >/dev/null; [ ! -e "$STATE" ] && ok || bad "verify --remove kept $STATE"
"$TERN" cache verify --cache-dir "$D" >/dev/null && ok || bad "verify after --remove"
# Another process holds the lock until told to let go (no sleep to race a loaded machine).
flock "$D/.tern-lock" sh -c 'touch "$1"; while [ -e "$1" ]; do sleep 0.05; done' _ "$W/held" &
until [ -e "$W/held" ]; do sleep 0.05; done
expect_error "clear while in use" "in use by another tern process" "$TERN" cache clear --cache-dir "$D"
rm "$W/held"
wait
"$TERN" cache clear --cache-dir "$D" >"$W/clear" && grep -q "removed [1-9]" "$W/clear" && ok || bad "cache clear: $(cat "$W/clear")"
[ "$(ls -A "$D")" = .tern-lock ] && ok || bad "clear left $(ls -A "$D")"
expect_error "no cache directory" "no cache directory at" "$TERN" cache list --cache-dir "$W/none"
expect_error "bad disk size" "--cache-disk 'lots' is not a size" "$TERN" chat --model "$W/tok" --cache-disk lots

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
