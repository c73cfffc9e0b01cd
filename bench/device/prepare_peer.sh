#!/usr/bin/env bash
# Here: packs what bench/device/llama_peer.sh runs on the GPU machine into
# bench/prebuilt-peer (git-ignored; name it in the call's carry), xz-compressed
# to fit the call's 64 MiB (llama.cpp's CUDA library alone is 58 MB stripped):
#   peer.tar.xz  llama-bench and llama-batched-bench of a llama.cpp CUDA build
#                made outside this repository, the shared libraries they load
#                but CUDA's and NCCL's (the GPU machine has those), llama.cpp's
#                gguf-py, the issue's random-GGUF writer, REV
#   tern.tar.xz  a tern build from prepare_device.sh (tern, lib/, REV), no tests
#   prepare_peer.sh LLAMA_SRC LLAMA_BUILD WRITER LLAMA_REV [TERN_PREBUILT]
# LLAMA_BUILD: cmake -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a
# -DGGML_NATIVE=OFF -DGGML_CUDA_NCCL=OFF -DLLAMA_BUILD_SERVER=OFF
# -DLLAMA_BUILD_UI=OFF -DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined
# (libcuda is the driver's, absent without a GPU) '-DCMAKE_BUILD_RPATH=$ORIGIN/../lib',
# targets llama-bench llama-batched-bench (38 minutes on 2 cores).
set -euo pipefail
src=$1 build=$2 writer=$3 rev=$4 tern=${5:-bench/prebuilt}
cd "$(dirname "$0")/../.."
D=bench/prebuilt-peer
S=$(mktemp -d)
mkdir -p $S/peer/bin $S/peer/lib $S/tern
cp "$build"/bin/llama-bench "$build"/bin/llama-batched-bench $S/peer/bin/
for lib in $(LD_LIBRARY_PATH="$build"/bin ldd $S/peer/bin/* | awk '$3 ~ /^\// {print $3}' |
  grep -vE '/lib(c|m|gcc_s|stdc\+\+|pthread|dl|rt)\.so|/ld-linux|/libcuda|/libcublas|/libcudart|/libnccl' |
  sort -u); do
  cp -L "$lib" $S/peer/lib/
done
strip --strip-unneeded $S/peer/lib/*.so* $S/peer/bin/*
cp -r "$src"/gguf-py "$writer" $S/peer/
echo "$rev" >$S/peer/REV
cp -r "$tern"/tern "$tern"/lib "$tern"/REV "$tern"/SOURCE_DIR $S/tern/
rm -rf $D && mkdir -p $D
tar cf - -C $S peer | xz -T0 -6 >$D/peer.tar.xz
tar cf - -C $S tern | xz -T0 -6 >$D/tern.tar.xz
rm -rf "$S"
du -sh $D/*
