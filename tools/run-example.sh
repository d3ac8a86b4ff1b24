#!/usr/bin/env bash
# Installs dependencies, builds tunehost and runs the example experiment end to end.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/tools/setup-debian.sh"
bash "$root/tools/build.sh" "$root/build" -DTH_BUILD_TESTS=OFF
exec "$root/build/bin/tunehost" run "$root/examples/quadratic/experiment.yaml" \
  --plugins "$root/build/plugins"
