#!/usr/bin/env bash
# Builds the libFuzzer harnesses with clang (ASan + UBSan) and fuzzes each for
# a while. A crash, hang or leak is copied to tests/fuzz/regressions/<harness>/
# (every build replays those: ctest fuzz.<harness>) and the script fails.
#
# Usage: tools/fuzz/run.sh [--time SECONDS] [--build DIR] [HARNESS...]
#   --time   seconds per harness (default 60)
#   --build  the clang build directory (default build-fuzz)
# Harnesses: decode experiment_config search_space metric_line (default: all).
# The corpus grows in <build>/corpus/<harness> between runs.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
seconds=60
build=$root/build-fuzz
harnesses=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --time) seconds=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) harnesses+=("$1"); shift ;;
  esac
done
[[ ${#harnesses[@]} -gt 0 ]] || harnesses=(decode experiment_config search_space metric_line)

launcher=()  # ccache when installed, as tools/build.sh
if command -v ccache >/dev/null && ccache --show-stats >/dev/null 2>&1; then
  export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=true
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DPython3_EXECUTABLE=/usr/bin/python3 -DTH_FUZZ=ON -DTH_BUILD_TESTS=OFF "${launcher[@]}" >/dev/null
targets=()
for h in "${harnesses[@]}"; do targets+=(--target "tunehost-fuzz-$h"); done
cmake --build "$build" -j"$(nproc)" "${targets[@]}" >/dev/null
/usr/bin/python3 "$root/tools/fuzz/seeds.py" --out "$build/seeds"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
for h in "${harnesses[@]}"; do
  corpus=$build/corpus/$h
  artifacts=$build/artifacts/$h
  mkdir -p "$corpus" "$artifacts"
  regressions=$root/tests/fuzz/regressions/$h
  inputs=("$corpus" "$build/seeds/$h")
  [[ -d $regressions ]] && inputs+=("$regressions")
  echo "== fuzz $h for ${seconds}s"
  if ! "$build/bin/tunehost-fuzz-$h" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -max_len=65536 -print_final_stats=1 -artifact_prefix="$artifacts/" \
      "${inputs[@]}" 2>"$build/$h.log"; then
    status=1
    mkdir -p "$regressions"
    for crash in "$artifacts"/*; do
      [[ -e $crash ]] || continue
      cp "$crash" "$regressions/"
      echo "fuzz $h: found $(basename "$crash"), kept in tests/fuzz/regressions/$h/"
    done
    grep -E "ERROR|SUMMARY|==[0-9]+==" "$build/$h.log" | head -20 || true
  fi
  grep -E "stat::number_of_executed_units|stat::new_units_added" "$build/$h.log" | tr '\n' ' ' || true
  echo
done
exit $status
