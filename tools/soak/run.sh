#!/usr/bin/env bash
# The fault soak (tools/soak/soak.py): builds what it needs, then runs an
# experiment on many workers while killing, stopping and flooding everything
# around it, and prints the integrity table.
# Usage: tools/soak/run.sh [--minutes M] [--workers N] [--seed S] [--build DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build
args=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
cmake --build "$build" -j"$(nproc)" --target tunehost tunehost-worker tunehost-plugin-runner tpe \
  >/dev/null
exec /usr/bin/python3 "$root/tools/soak/soak.py" --build "$build" "${args[@]}"
