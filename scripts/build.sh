#!/usr/bin/env bash
# Configures (Ninja, RelWithDebInfo) and builds tensord into ./build.
# Extra arguments go to the configure step, e.g. -DTENSORD_BUILD_BENCH=OFF.
# BUILD_DIR overrides the build directory, JOBS the parallelism.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}

launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" "$@"
if [[ -n ${JOBS:-} ]]; then
  cmake --build "$build" -j "$JOBS"
else
  cmake --build "$build"
fi
