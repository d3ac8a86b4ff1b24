#!/usr/bin/env bash
# The algorithm benchmark: tunehost's tuners (tpe, tpe multivariate, anneal,
# evolution, random) vs Optuna 3.1 (TPE, random), plus the host's per-trial
# cost. Builds what it needs, prints one set of markdown tables on stdout
# (progress on stderr). Usage:
#   tools/bench/algorithms.sh [BUILD_DIR] [--quick] [--jobs N] [--no-build]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# Debian's interpreter: the one that has python3-optuna.
if ! /usr/bin/python3 -c 'import optuna' 2>/dev/null; then
  echo "algorithms.sh: Optuna is missing; install it with: apt-get install -y python3-optuna python3-cmaes" >&2
  exit 2
fi
exec /usr/bin/python3 "$here/algorithms.py" "$@"
