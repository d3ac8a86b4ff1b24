#!/usr/bin/env bash
# Installs everything tunehost needs to build, test and run on Debian 12.
# Idempotent: apt-get skips what is already installed.
# Usage: tools/setup-debian.sh [--test]
#   --test  also what only the test suite uses: clang and libFuzzer (fuzzing),
#           a one-node Slurm with munge and procps (tests/cluster), iproute2 (network
#           namespaces for the two-machine test), python3-yaml (manifest checks),
#           chromium, chromium-driver, python3-selenium and a font (web UI tests),
#           openssl (a certificate for the HTTPS test)
set -euo pipefail
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; fi
test_packages=()
if [[ ${1:-} == --test ]]; then
  test_packages=(clang libclang-rt-14-dev slurmctld slurmd slurm-client munge iproute2
                 procps python3-yaml chromium chromium-driver python3-selenium fonts-dejavu-core
                 openssl universal-ctags)
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  g++ cmake make pkg-config ccache \
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libmsgpack-dev libboost-dev libspdlog-dev \
  libgtest-dev libgmock-dev libsqlite3-dev libyaml-cpp-dev libcli11-dev nlohmann-json3-dev \
  libcpp-httplib-dev libjs-chart.js libeigen3-dev \
  python3 python3-zmq python3-msgpack "${test_packages[@]}" >/dev/null
echo "setup-debian: dependencies installed"
