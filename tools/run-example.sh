#!/usr/bin/env bash
# Installs dependencies, builds tunehost, runs the example experiment end to
# end (its web UI is served while it runs), then writes its report: one HTML
# file that opens offline.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/tools/setup-debian.sh"
bash "$root/tools/build.sh" "$root/build" -DTH_BUILD_TESTS=OFF
id="example-$(date +%Y%m%d-%H%M%S)-$$"
"$root/build/bin/tunehost" run "$root/examples/quadratic/experiment.yaml" \
  --plugins "$root/build/plugins" --id "$id"
"$root/build/bin/tunehost" report "$id"
