#!/bin/bash
# `systemd-analyze verify` on systemd/tensord.service and tensord.socket, with
# ExecStart pointed at the daemon of this build (verify insists that the
# binary exists). Any complaint fails the test.
#   tests/systemd/verify_units.sh BUILD_DIR
# Exit: 0 clean, 1 complaints, 77 skipped (no systemd-analyze).
set -euo pipefail
build=$(cd "${1:?usage: verify_units.sh BUILD_DIR}" && pwd)
source=$(cd "$(dirname "$0")/../.." && pwd)
command -v systemd-analyze >/dev/null || { echo "SKIP: systemd-analyze is not installed"; exit 77; }

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sed "s|/usr/local/bin/tensord|$build/server/tensord|" "$source/systemd/tensord.service" >"$dir/tensord.service"
cp "$source/systemd/tensord.socket" "$dir/tensord.socket"
cd "$dir"
if ! out=$(systemd-analyze verify tensord.service tensord.socket 2>&1) || [[ -n $out ]]; then
  echo "systemd-analyze verify complained:"
  echo "$out"
  exit 1
fi
echo "systemd-analyze verify: tensord.service and tensord.socket are clean"
