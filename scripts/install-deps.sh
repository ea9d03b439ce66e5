#!/usr/bin/env bash
# Installs every Debian 12 package tensord's build, tests and benchmark need.
# Idempotent: packages already present are left as they are. Uses sudo when
# not run as root.
set -euo pipefail

packages=(
  # toolchain
  cmake g++ ninja-build pkg-config
  # Vulkan: loader + headers, glslang (library and tools), SPIR-V tools,
  # Mesa's drivers (lavapipe, the CPU device used when there is no GPU)
  libvulkan-dev glslang-dev glslang-tools spirv-tools mesa-vulkan-drivers vulkan-tools
  # RPC, TLS, logging, config
  libcapnp-dev capnproto libssl-dev openssl libspdlog-dev libfmt-dev nlohmann-json3-dev
  # systemd notify/journald integration
  libsystemd-dev
  # the daemon's allocator
  libmimalloc-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev python3-numpy
  # the Python client (python3-tqdm, optional, adds progress bars) and its tests
  python3-dev pybind11-dev python3-pytest
  # the reference Prometheus text parser the metrics tests check against
  python3-prometheus-client
)

if [[ $(id -u) -eq 0 ]]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
else
  echo "install-deps.sh: not root and sudo is not installed" >&2
  exit 1
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps.sh: all ${#packages[@]} packages already installed"
  exit 0
fi

echo "install-deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
