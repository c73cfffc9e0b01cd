#!/usr/bin/env bash
# llama.cpp beside tern on the GPU machine, in one call: the peer's prompt
# sweep and decode at depth (llama-bench) and its batched decode
# (llama-batched-bench) on a random GGUF of the 35B-A3B shapes, written there
# first; then tern's prompt sweep and `tern bench --concurrency` on the
# 35b-a3b dummy. Carry bench/prebuilt-peer (prepare_peer.sh: llama.cpp's CUDA
# build and a tern build, xz-compressed), unpacked here into
# bench/prebuilt-peer-out, where the GGUF (18.2 GiB) also stays while the
# machine is warm, so a second call skips writing it. STEPS picks some of:
# gguf prompt batched tern-prompt tern-batched. Logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
W=bench/prebuilt-peer-out
mkdir -p $W
rm -rf $W/peer $W/tern  # this call's builds, not a warm machine's older ones
for a in peer tern; do xz -dc bench/prebuilt-peer/$a.tar.xz | tar xf - -C $W; done
export PREBUILT=$W/tern
source bench/device/prebuilt_env.sh
P=$W/peer
G=$W/q35.gguf
# CUDA's and NCCL's libraries from the machine's toolkit or PyTorch's wheels
# (NCCL only links: one GPU never calls it; a stub where none is found).
libs=$(find /usr/local/cuda*/ /opt /usr/lib/x86_64-linux-gnu \( -name libcublas.so.13 -o \
  -name libcudart.so.13 -o -name libnccl.so.2 \) 2>/dev/null | xargs -r -n1 dirname | sort -u)
if ! ls $libs 2>/dev/null | grep -q libnccl.so.2; then
  mkdir -p $W/stub
  echo 'void ncclAllReduce(void) {} void ncclCommDestroy(void) {} void ncclCommInitAll(void) {}
void ncclGetErrorString(void) {} void ncclGroupEnd(void) {} void ncclGroupStart(void) {}' >$W/stub/n.c
  gcc -shared -fPIC -Wl,-soname,libnccl.so.2 -o $W/stub/libnccl.so.2 $W/stub/n.c && libs="$libs $PWD/$W/stub"
fi
export LD_LIBRARY_PATH=$PWD/$P/lib:$(echo $libs | tr ' ' ':'):$LD_LIBRARY_PATH
steps=${STEPS:-"gguf prompt batched tern-prompt tern-batched"}
has() { [[ " $steps " == *" $1 "* ]]; }
short=${PROMPTS:-256,512,1024,2048,4096,8192,16384,32768}
long=${LONG_PROMPTS:-65536,131072}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
echo "llama.cpp $(cat $P/REV), tern $REV"
if has gguf && [ ! -s $G ]; then
  python3 $P/make_random_qwen35moe_gguf.py $G.tmp --gguf-py $P/gguf-py >$OUT/gguf.log 2>&1 &&
    mv $G.tmp $G
  echo "gguf: $(du -h $G 2>/dev/null | cut -f1) ($(tail -1 $OUT/gguf.log))"
fi
L="$P/bin/llama-bench -m $G -ngl 99 -fa 1 -ub 2048 -b 2048"
if has prompt; then
  echo "\$ llama-bench -m q35.gguf -ngl 99 -fa 1 -ub 2048 -b 2048 -n 0 -p ... (-r 3 to 32K, 1 beyond)"
  $L -n 0 -p $short -r 3 2>&1 | tee $OUT/llama-prompt.txt | grep -E '^\|'
  $L -n 0 -p $long -r 1 2>&1 | tee -a $OUT/llama-prompt.txt | grep -E '^\| .*pp'
  echo "\$ llama-bench ... -p 0 -n 128 -d 4096,32768 -r 2"
  $L -p 0 -n 128 -d 4096,32768 -r 2 2>&1 | tee $OUT/llama-decode.txt | grep -E '^\| .*tg'
fi
if has batched; then
  B="$P/bin/llama-batched-bench -m $G -ngl 99 -fa 1 -ub 2048 -b 2048"
  echo "\$ llama-batched-bench ... -c 69632 -npp 4096 -ntg 128 -npl 1,2,4,8,16"
  $B -c 69632 -npp 4096 -ntg 128 -npl 1,2,4,8,16 2>&1 | tee $OUT/llama-batched.txt | grep -E '^\|'
  echo "\$ llama-batched-bench ... -c 262656 -npp 32768 -ntg 64 -npl 1,2,4,8"
  $B -c 262656 -npp 32768 -ntg 64 -npl 1,2,4,8 2>&1 | tee -a $OUT/llama-batched.txt |
    grep -E '^\|'
fi
T="$BIN/tern bench --dummy 35b-a3b --backend cuda --rev $REV"
if has tern-prompt; then
  echo "\$ tern bench --dummy 35b-a3b --backend cuda --prefill ... --repeat 3"
  $T --prefill $short,$long --repeat 3 --json $OUT/tern-prompt.json 2>&1 |
    tee $OUT/tern-prompt.txt | grep -E '^ +[0-9]+ |^ +prompt|bf16 matrix'
fi
if has tern-batched; then
  for ctx in 4096 32768; do
    conc=1,2,4,8,16 gen=128
    [ $ctx = 32768 ] && conc=1,2,4,8 gen=64
    echo "\$ tern bench --dummy 35b-a3b --backend cuda --concurrency $conc --decode $ctx --gen $gen"
    $T --concurrency $conc --decode $ctx --gen $gen 2>&1 | tee -a $OUT/tern-batched.txt |
      grep -v " info "
  done
fi
