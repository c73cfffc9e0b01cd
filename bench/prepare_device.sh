#!/usr/bin/env bash
# Builds here what bench/device_run.sh runs on the GPU machine (which has no
# fmt, spdlog, PCRE2, utf8proc, cairo or GoogleTest) and puts it in bench/prebuilt
# (git-ignored; name it in the device call's `carry`).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTERN_WERROR=ON >/dev/null
cmake --build build -j "$(nproc)" --target tern test_cuda
rm -rf bench/prebuilt && mkdir -p bench/prebuilt/lib
cp build/tern build/test_cuda bench/prebuilt/
# Every shared library the binaries load but the C and C++ runtimes (cairo, for
# --plot's PNGs, brings its own: pixman, freetype, fontconfig, the X client libraries).
for lib in $(ldd build/tern build/test_cuda |
  awk '$3 ~ /^\// && $1 !~ /^(libc|libm|libgcc_s|libstdc\+\+)\.so|^ld-linux/ {print $3}' | sort -u); do
  cp -L "$lib" bench/prebuilt/lib/
done
pwd >bench/prebuilt/SOURCE_DIR
git rev-parse --short HEAD >bench/prebuilt/REV
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then echo "+dirty" >>bench/prebuilt/REV; fi
# TRACE=1: also a TERN_TRACE build's tern (bench/trace.sh runs it).
if [ "${TRACE:-0}" = 1 ]; then
  cmake -S . -B build-trace -G Ninja -DCMAKE_BUILD_TYPE=Release -DTERN_WERROR=ON -DTERN_TRACE=ON >/dev/null
  cmake --build build-trace -j "$(nproc)" --target tern
  mkdir -p bench/prebuilt/trace && cp build-trace/tern bench/prebuilt/trace/
fi
du -sh bench/prebuilt
