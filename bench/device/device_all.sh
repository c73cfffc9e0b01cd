#!/usr/bin/env bash
# One GPU call for everything at once, when device time is short: the CUDA
# tests (TERN_REQUIRE_GPU=1, summary as device_run.sh writes it), the prefill
# sweep, the per-phase split at 2K and 32K, a decode check at 4K and 128K, and the
# serving path (bench/device/serve_device.py: session reuse, the server's cost per
# token, constrained decoding's cost). Binaries from bench/device/prepare_device.sh;
# carry bench/prebuilt and bench/prebuilt/tokenizer (prepare_device.sh
# TOKENIZER=1 copies the Qwen3 tokenizer there; step `base` also carries the
# build named by BASE). Each step has a time limit;
# logs and JSON under $OUT.
set -uo pipefail
source "$(dirname "$0")/prebuilt_env.sh"
T=$BIN/tern
steps=${STEPS:-"tests sweep short decode serve"}  # STEPS picks some
has() { [[ " $steps " == *" $1 "* ]]; }
B="$T bench --dummy 35b-a3b --backend cuda --rev $REV"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used,memory.total --format=csv,noheader | tee $OUT/gpu.txt
if has tests; then
(cd "$SRC" && TERN_REQUIRE_GPU=1 timeout ${TESTS_S:-280} $PWD/$BIN/test_cuda --gtest_brief=1 \
  --gtest_output=json:$OUT/tests.json) >$OUT/tests.log 2>&1
test_rc=$?
python3 bench/device/test_summary.py "$OUT/tests.json" "$test_rc" "$REV" >$OUT/summary.txt
cat $OUT/summary.txt; grep -E '^\[  FAILED  \]' $OUT/tests.log | head -20
fi
if has sweep; then
timeout ${SWEEP_S:-110} $B --prefill ${PREFILL:-256,512,1024,2048,4096,8192,16384,32768,65536,131072} \
  --repeat 3 --json $OUT/prefill.json --plot $OUT/prefill.svg >$OUT/prefill.log 2>&1
echo "sweep exit $?"; grep -E '^ +[0-9]+ |bf16 matrix' $OUT/prefill.log
# The per-phase split where docs/kernels/cuda-prefill.md reports it.
timeout 40 $B --prefill 2048,32768 --repeat 1 --split --json $OUT/prefill-split.json \
  >$OUT/prefill-split.log 2>&1
echo "split exit $?"; grep -E 'split at' $OUT/prefill-split.log | cut -c1-300
fi
# The baseline of an A/B on the same machine: another build's tern carried in
# BASE (e.g. bench/prebuilt-base, the revision before a kernel change) at the
# prompt lengths BASE_PREFILL, and its split at 32K (this build's are the sweep's).
if has base; then
  for bin in "$BASE"; do
    echo "$bin ($(cat $bin/REV 2>/dev/null || echo base)):"
    timeout 120 $bin/tern bench --dummy 35b-a3b --backend cuda --rev "$REV" \
      --prefill ${BASE_PREFILL:-2048,8192,32768} --repeat 3 2>&1 | grep -E '^ +[0-9]+ '
    timeout 40 $bin/tern bench --dummy 35b-a3b --backend cuda --rev "$REV" --prefill 32768 \
      --repeat 1 --split 2>&1 | grep -E 'split at|by kernel' | cut -c1-400
  done 2>&1 | tee $OUT/base-ab.log
fi
# Short chunks: the grouped GEMM's tile width by rows per expert, the
# prefill path under the decode step's threshold, the split at 256.
if has short; then
for bn in 0 16 32 64; do
  echo "moe-bn $bn:"
  timeout 40 $B --prefill 256,512,1024,2048,4096 --moe-bn $bn --repeat 3 2>&1 | grep -E '^ +[0-9]+ '
done
echo "prefill path for short calls (--prefill-step-below 1):"
timeout 40 $B --prefill 8,16,32,64,128 --prefill-step-below 1 --repeat 3 2>&1 | grep -E '^ +[0-9]+ '
echo "weight tiles of 128 rows (--gemm-bm 128):"
timeout 40 $B --prefill 32,256,1024 --gemm-bm 128 --repeat 3 2>&1 | grep -E '^ +[0-9]+ '
timeout 40 $B --prefill 32,256 --repeat 1 --split >$OUT/prefill-split-short.log 2>&1
grep -E 'split at' $OUT/prefill-split-short.log | cut -c1-400
fi
if has decode; then
timeout 45 $B --decode 4096,131072 --gen 64 --repeat 2 --json $OUT/decode.json >$OUT/decode.log 2>&1
echo "decode exit $?"; grep -E '^ +[0-9]+ ' $OUT/decode.log
fi
if has serve; then
timeout ${SERVE_S:-120} python3 bench/device/serve_device.py --tern $T --tokenizer $BIN/tokenizer \
  --rev "$REV" --json $OUT/serve.json >$OUT/serve.log 2>&1
echo "serve exit $?"; cut -c1-400 $OUT/serve.log
fi
# At most eight files come back from a call: the logs and JSON in one archive.
tar czf $OUT/all.tar.gz -C $OUT --exclude all.tar.gz . 2>/dev/null
! has tests || grep -q ': PASS$' $OUT/summary.txt
