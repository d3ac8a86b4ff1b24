#!/usr/bin/env bash
# Installs everything tunehost needs to build, test and run on Debian 12.
# Idempotent: apt-get skips what is already installed.
set -euo pipefail
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  g++ cmake make pkg-config \
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libboost-dev libspdlog-dev \
  libgtest-dev libgmock-dev libsqlite3-dev libyaml-cpp-dev libcli11-dev nlohmann-json3-dev \
  python3 python3-zmq python3-msgpack \
  clang libclang-rt-14-dev >/dev/null
echo "setup-debian: dependencies installed"
