#!/usr/bin/env bash
# Runs every tunehost benchmark; each prints ratios against a baseline measured
# in the same run. Usage: tools/bench/run.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
cmake --build "$build" -j"$(nproc)" --target tunehost-bench random >/dev/null
"$build/bin/tunehost-bench" --plugins "$build/plugins"
