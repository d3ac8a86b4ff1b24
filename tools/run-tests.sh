#!/usr/bin/env bash
# Installs dependencies, builds tunehost twice (RelWithDebInfo, and with
# AddressSanitizer + UBSan), runs the whole test suite in both builds, then
# fuzzes every harness briefly (tools/fuzz).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/tools/setup-debian.sh" --test
bash "$root/tools/build.sh" "$root/build" -DTH_BUILD_TESTS=ON
bash "$root/tools/build.sh" "$root/build-asan" -DTH_BUILD_TESTS=ON -DTH_SANITIZE=ON
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
echo "== tests: RelWithDebInfo build"
(cd "$root/build" && ctest --output-on-failure -j2 --timeout 300) || status=1
echo "== tests: ASan+UBSan build"
(cd "$root/build-asan" && ctest --output-on-failure -j2 --timeout 300) || status=1
echo "== fuzz: every harness for 10 s (clang, libFuzzer, ASan+UBSan)"
bash "$root/tools/fuzz/run.sh" --time 10 || status=1
exit $status
