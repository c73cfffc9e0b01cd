#!/usr/bin/env bash
# Fails if any tracked file refers to the development workplace's ../shared
# folder (or a path inside it): a clone of tern has nothing beside it, so every
# file a test needs lives in tests/data or comes from a package setup.sh installs.
set -euo pipefail
cd "$(dirname "$0")/../.."
self="tests/repo/no_outside_paths.sh"
pattern='\.\./shared([/"'"'"' ]|$)|shared/(fixtures|spec|tools|hooks)|/work/shared'
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
echo "no tracked file refers to ../shared ($(echo "$files" | wc -l) files checked)"
