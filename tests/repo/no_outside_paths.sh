#!/usr/bin/env bash
# Fails if any tracked file refers to the development workplace's folder of
# shared material beside the checkout (or a path inside it): a clone of tern
# has nothing beside it, so every file a test needs lives in tests/data or
# comes from a package setup.sh installs. The folder's name is assembled here,
# so this file does not name it itself.
set -euo pipefail
cd "$(dirname "$0")/../.."
self="tests/repo/no_outside_paths.sh"
name="sha""red"
pattern="\\.\\./${name}([/\"' ]|\$)|${name}/(fixtures|spec|tools|hooks)|/work/${name}"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  files=$(git ls-files | grep -vxF "$self")
else  # a source tarball: every file but the build and the npm packages
  files=$(find . -type f -not -path './build*' -not -path './third_party/*' -not -path './.git/*' |
    sed 's|^\./||' | grep -vxF "$self")
fi
hits=$(echo "$files" | tr '\n' '\0' | xargs -0 grep -nIE "$pattern" -- 2>/dev/null || true)
if [ -n "$hits" ]; then
  echo "These lines refer to a folder outside the repository:"
  echo "$hits"
  exit 1
fi
echo "no tracked file refers to ../${name} ($(echo "$files" | wc -l) files checked)"
