#!/usr/bin/env bash
# The algorithm benchmark: the cost of a suggestion (tunehost tpe vs Optuna
# TPE), the quality suite of tools/bench/problems.py (tunehost tpe, cmaes,
# gp, random vs Optuna TPE, multivariate TPE and CMA-ES; tuning and held-out
# halves with the targets' verdicts) and the host's per-trial cost. Builds
# what it needs, prints one set of markdown tables on stdout (progress on
# stderr). Usage:
#   tools/bench/algorithms.sh [BUILD_DIR] [--quick] [--jobs N] [--no-build]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# Debian's interpreter: the one that has python3-optuna.
if ! /usr/bin/python3 -c 'import optuna' 2>/dev/null; then
  echo "algorithms.sh: Optuna is missing; install it with:" \
       "apt-get install -y python3-optuna python3-cmaes python3-sklearn" >&2
  exit 2
fi
if ! /usr/bin/python3 -c 'import sklearn' 2>/dev/null; then
  echo "algorithms.sh: python3-sklearn is missing: the two tabular problems are skipped" >&2
fi
exec /usr/bin/python3 "$here/algorithms.py" "$@"
