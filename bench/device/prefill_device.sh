#!/usr/bin/env bash
# One GPU call for the prefill work (issue 23), from binaries built here and
# carried (DEST=<main>/bench/prebuilt-prefill bench/device/prepare_device.sh, this
# script copied beside them, run as bench/prebuilt-prefill/prefill_device.sh):
# the GPU tests (TERN_REQUIRE_GPU=1), the prefill sweep with the per-phase
# split, a 256K-token prompt, variants (MoE and dense tile widths, the GDN
# scan against the chunked form, chunk sizes), a decode regression check and
# the GEMM's SASS instruction mix; every step under a time limit. Logs under
# $OUT, a short table last. STEPS picks steps (default: all).
set -uo pipefail
cd "$(dirname "$0")/../.."
PREBUILT=bench/prebuilt-prefill source bench/device/prebuilt_env.sh
T=$BIN/tern
steps=${STEPS:-"tests sweep long variants decode sass"}
has() { [[ " $steps " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used,memory.total --format=csv,noheader
B="$T bench --dummy 35b-a3b --backend cuda --rev $REV"
if has tests; then
  (cd "$SRC" && TERN_REQUIRE_GPU=1 timeout ${TESTS_S:-150} $PWD/$BIN/test_cuda --gtest_brief=1 \
    --gtest_filter="${FILTER:-*}") >$OUT/tests.log 2>&1
  echo "tests exit $?"
fi
if has sweep; then
  timeout ${SWEEP_S:-120} $B --prefill ${PREFILL:-256,512,1024,2048,4096,8192,16384,32768,65536,131072} \
    --repeat ${REPEAT:-3} --split --json $OUT/prefill.json --plot $OUT/prefill.svg >$OUT/prefill.log 2>&1
  echo "sweep exit $?"
fi
{
  if has long; then
    echo "== 256K prompt"; timeout 55 $B --prefill 262144 --repeat 1 2>&1 | tail -3
  fi
  if has variants; then
    # VARIANTS: ';'-separated option sets, each timed at VARIANT_LENGTHS.
    IFS=';' read -ra vs <<<"${VARIANTS:---gemm-bm 128;--moe-bn 128;--dense-bn 64;--prefill-chunk 16384;--gdn-chunked-from 1000000000}"
    for v in "${vs[@]}"; do
      echo "== $v"; timeout 15 $B --prefill ${VARIANT_LENGTHS:-512,4096,32768} --repeat 2 $v 2>&1 |
        awk '$1 ~ /^[0-9]+$/'
    done
    echo "== GDN scan vs chunked at short lengths"
    for v in "--gdn-chunked-from 1000000000" "--gdn-chunked-from 1"; do
      echo "-- $v"; timeout 10 $B --prefill 16,32,64,128,256 --repeat 3 $v 2>&1 | awk '$1 ~ /^[0-9]+$/'
    done
  fi
} >$OUT/variants.log 2>&1
if has decode; then
  timeout 45 $B --decode 4096,131072 --gen 64 --repeat 2 --json $OUT/decode.json >$OUT/decode.log 2>&1
  echo "decode exit $?"
fi
if has sass; then
  # Instruction mix of the dense GEMM kernel (tile layout, BM 256, BN 128, store).
  cuobjdump -sass $T 2>/dev/null | awk '/Function : .*gemm_kernelILi256ELi128ELNS0_7GemmOutE0ELb1/ {on=1; next}
    /Function :/ {on=0} on && /\/\*[0-9a-f]+\*\// {for (i = 1; i <= NF; i++) if ($i ~ /^[A-Z][A-Z0-9.]+$/) {split($i, p, "."); n[p[1]]++; break}}
    END {for (k in n) print n[k], k}' | sort -rn | head -25 >$OUT/sass-mix.txt
fi
echo "== measured errors"; grep '\[measured\]' $OUT/tests.log 2>/dev/null | cut -c1-130 | head -40
echo "== sass"; tr '\n' ' ' <$OUT/sass-mix.txt 2>/dev/null; echo
echo "== variants"; cut -c1-120 $OUT/variants.log
echo "== decode"; grep -E '^ +[0-9]+ ' $OUT/decode.log 2>/dev/null
echo "== prefill"; grep -E '^ +[0-9]+ |split|by kernel|bf16 matrix' $OUT/prefill.log 2>/dev/null | cut -c1-330
echo "== tests: $(grep -E '^\[  (PASSED|FAILED)  \]|tests ran' $OUT/tests.log | tr '\n' ' ')"
grep -E '^\[  FAILED  \]' $OUT/tests.log | head -20
