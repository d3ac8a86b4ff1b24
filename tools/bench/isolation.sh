#!/usr/bin/env bash
# What `isolation: process` costs per trial (generate, receive_trial_result,
# trial_end), against the same tuner in-process in the same run.
# Usage: tools/bench/isolation.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
cmake --build "$build" -j"$(nproc)" --target tunehost-isolation-bench random tpe >/dev/null
"$build/bin/tunehost-isolation-bench" --plugins "$build/plugins"
