#!/usr/bin/env bash
# Runs the host benchmarks; each figure is printed next to a baseline measured
# in the same run, with met/NOT MET for its target:
#   1. metric ingest vs raw ZeroMQ PUSH/PULL (tunehost-bench)
#   2. worker free -> next NewTrialJob vs a raw DEALER/ROUTER round trip (tunehost-bench)
#   3. per-trial host cost from 1k to 100k trials through `tunehost run` and
#      `tunehost serve`, RSS and store bytes per trial, tunectl latency (scale.py)
#   4. offers per trial and makespan for fleets of 16 to 1000 workers (tunehost-bench)
# Usage: tools/bench/run.sh [BUILD_DIR] [--quick]
#   --quick  smaller sizes (1k and 10k trials, fleets of 16 and 64): a few minutes
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build
quick=0
for arg in "$@"; do
  case $arg in
    --quick) quick=1 ;;
    *) build=$arg ;;
  esac
done
cmake --build "$build" -j"$(nproc)" \
  --target tunehost-bench tunehost tunehost-worker tunectl random >/dev/null
fleets=16,64,256,1000
sizes=1000,10000,100000
if [[ $quick == 1 ]]; then
  fleets=16,64
  sizes=1000,10000
fi
"$build/bin/tunehost-bench" --plugins "$build/plugins" --fleets "$fleets"
echo
echo "target 3: per-trial host cost by experiment size, through the binaries"
/usr/bin/python3 "$root/tools/bench/scale.py" --build "$build" --sizes "$sizes"
