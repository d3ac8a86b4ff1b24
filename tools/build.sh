#!/usr/bin/env bash
# Configures and builds tunehost. Usage: tools/build.sh [BUILD_DIR] [extra cmake args...]
# With ccache installed (tools/setup-debian.sh installs it), compilations go
# through it, keyed on paths relative to the checkout, so a second clone or a
# second build directory of the same sources reuses the objects (a cache
# only: a miss compiles as without it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/build}
shift || true
launcher=()
if command -v ccache >/dev/null && ccache --show-stats >/dev/null 2>&1; then
  export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=true
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPython3_EXECUTABLE=/usr/bin/python3 \
  "${launcher[@]}" "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)"
