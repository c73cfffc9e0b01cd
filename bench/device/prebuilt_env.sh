# Sourced by the device scripts: run from the repository root with the
# binaries carried in bench/prebuilt and the shared libraries they need, and
# make the source path compiled into the tests (for tests/data) point here.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BIN=${PREBUILT:-bench/prebuilt}  # PREBUILT: another carried folder (a helper worktree's build)
export LD_LIBRARY_PATH=$PWD/$BIN/lib:${LD_LIBRARY_PATH:-}
SRC=$(cat $BIN/SOURCE_DIR)
if [ "$SRC" != "$PWD" ]; then mkdir -p "$(dirname "$SRC")" && ln -sfn "$PWD" "$SRC"; fi
REV=$(tr -d "\n" <$BIN/REV)
