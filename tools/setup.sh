#!/usr/bin/env bash
# Installs every Debian package that building and testing tpserve needs.
# Idempotent: when everything is present it only checks and returns (about a second).
set -euo pipefail

PACKAGES=(
  bazel-bootstrap
  g++
  protobuf-compiler libprotobuf-dev
  libgrpc++-dev protobuf-compiler-grpc
  libabsl-dev
  libgloo-dev
  nlohmann-json3-dev
  libgtest-dev libgmock-dev
  libcli11-dev libspdlog-dev
  libpcre2-dev
  libssl-dev
  libcpp-httplib-dev
  libboost1.74-dev
  libicu-dev
  libopenblas-dev
  libdnnl-dev
  python3 python3-venv python3-grpcio python3-protobuf python3-numpy python3-yaml
  python3-prometheus-client
  nftables
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: note: /usr/local/cuda/bin/nvcc not found; CUDA targets will not build" >&2
fi
echo "setup: all build and test packages present"
