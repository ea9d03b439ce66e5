#!/usr/bin/env bash
# Builds tensord (scripts/build.sh) and runs the whole test suite with ctest.
# Extra arguments go to ctest, e.g. -R Integration or -j2.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}

"$root/scripts/build.sh"
ctest --test-dir "$build" --output-on-failure "$@"
