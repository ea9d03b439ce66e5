#!/bin/bash
# The installed unit under a real systemd. Boots a throwaway systemd as PID 1
# of new PID, mount and network namespaces, installs this build into it
# (`cmake --install` with DESTDIR, copied onto overlays of /etc, /usr/local
# and /var), and checks: the units verify clean, Type=notify READY, the
# STATUS= line following the load, `tensorctl stat` and the Prometheus
# endpoint, reload (SIGHUP), watchdog pings and a watchdog kill of a hung
# daemon followed by a restart, stop and start with named tensors surviving
# bit-exact, socket activation through tensord.socket, and the journal.
#
#   tests/systemd/boot_test.sh BUILD_DIR
#
# Needs: root (it mounts and makes namespaces), util-linux (unshare,
# nsenter), systemd 247 or later at /lib/systemd/systemd, overlayfs,
# /usr/bin/python3 with numpy and prometheus_client, and a host whose PID 1
# is not systemd (the booted one shares the host's cgroup tree). No file of
# the host changes: every write lands on a tmpfs or an overlay that goes away
# with the namespaces. What does stay: the booted systemd's early messages in
# the kernel log, and the empty cgroups it made in the host's hierarchy.
# Exit: 0 passed, 1 failed, 77 skipped (the reason is printed).
set -euo pipefail

skip() { echo "SKIP: $*"; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "needs root: it boots systemd in new PID, mount and network namespaces"
build=$(cd "${1:?usage: boot_test.sh BUILD_DIR}" && pwd)
source=$(cd "$(dirname "$0")/../.." && pwd)
[[ -x /lib/systemd/systemd ]] || skip "no systemd at /lib/systemd/systemd"
for tool in unshare nsenter cmake; do
  command -v "$tool" >/dev/null || skip "$tool is not installed"
done
[[ $(cat /proc/1/comm) != systemd ]] || skip "the host's PID 1 is systemd; a second one would share its cgroup tree"
grep -qw overlay /proc/filesystems || skip "the kernel has no overlayfs"
unshare --pid --fork --mount --net true 2>/dev/null || skip "cannot create PID, mount and network namespaces here"
/usr/bin/python3 -c 'import numpy, prometheus_client' 2>/dev/null ||
  skip "/usr/bin/python3 lacks numpy or prometheus_client (python3-numpy, python3-prometheus-client)"
[[ -x $build/server/tensord && -x $build/client/tensorctl ]] || skip "$build has no tensord and tensorctl built"

# The namespace mounts its own /tmp, so the work directory lives in the build
# directory, which both sides see.
work=$(mktemp -d "$build/systemd-boot.XXXXXX")
pid=""
checks=0
teardown() {
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
    kill -s SIGRTMIN+4 "$pid" 2>/dev/null || true  # systemd: power off
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap teardown EXIT

inside() { nsenter -t "$pid" -m -p -n "$@"; }
ctl() { inside "$build/client/tensorctl" "$@"; }
show() { inside systemctl show -p "$1" --value tensord.service; }
journal() { inside journalctl -u tensord --no-pager -o cat "$@"; }
fail() {
  echo "not ok - $*"
  echo "---- systemctl status tensord ----"
  inside systemctl status tensord --no-pager -l 2>&1 || true
  echo "---- journalctl -u tensord (last 60 lines) ----"
  journal -n 60 2>&1 || true
  exit 1
}
ok() { checks=$((checks + 1)); echo "ok $checks - $*"; }
# Polls `$@` for up to 30 s.
eventually() {
  for _ in $(seq 300); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  return 1
}

echo "# installing $build into a staging root"
DESTDIR=$work/root cmake --install "$build" >"$work/install.log"
# Short watchdog for the test, so pings and a timeout are seen in seconds.
mkdir -p "$work/root/etc/systemd/system/tensord.service.d"
printf '[Service]\nWatchdogSec=4s\n' >"$work/root/etc/systemd/system/tensord.service.d/test.conf"

echo "# booting systemd"
setsid unshare --pid --fork --mount --mount-proc --net --propagation private sh -c '
  set -e
  # Overlays over what the unit and the installation write; their upper
  # halves live on a tmpfs of this namespace.
  mount -t tmpfs tmpfs /mnt
  for dir in etc usr/local var; do
    name=$(echo "$dir" | tr / _)
    mkdir -p "/mnt/$name.upper" "/mnt/$name.work"
    mount -t overlay overlay -o "lowerdir=/$dir,upperdir=/mnt/$name.upper,workdir=/mnt/$name.work" "/$dir"
  done
  cp -a "$0/root/." /
  # Fresh /tmp, /run and /var/tmp: systemd cleans them at boot.
  mount -t tmpfs tmpfs /tmp && mount -t tmpfs tmpfs /run && mount -t tmpfs tmpfs /var/tmp
  exec /lib/systemd/systemd --system --unit=basic.target --log-target=journal-or-kmsg' "$work" \
  </dev/null >"$work/boot.log" 2>&1 &
unshared=$!
for _ in $(seq 100); do
  pid=$(ps -o pid= --ppid "$unshared" | tr -d ' ' | head -1 || true)  # none yet: ps fails
  [[ -n $pid ]] && nsenter -t "$pid" -m -p systemctl is-system-running --wait >/dev/null 2>&1 && break
  sleep 0.2
done
[[ -n $pid ]] || { cat "$work/boot.log"; echo "not ok - systemd did not boot"; exit 1; }
echo "# systemd $(inside systemctl --version | head -1 | cut -d' ' -f2) is PID 1 of the namespace (pid $pid here): $(inside systemctl is-system-running || true)"

# ---------------------------------------------------------------- install
inside systemd-sysusers || fail "systemd-sysusers"
inside getent group render >/dev/null || fail "the sysusers.d snippet did not create the render group"
ok "systemd-sysusers applied lib/sysusers.d/tensord.conf (group render exists)"
units=/usr/local/lib/systemd/system
out=$(inside systemd-analyze verify "$units/tensord.service" "$units/tensord.socket" 2>&1) || fail "systemd-analyze verify: $out"
[[ -z $out ]] || fail "systemd-analyze verify complained: $out"
ok "systemd-analyze verify: the installed tensord.service and tensord.socket are clean"
inside systemctl daemon-reload

# ---------------------------------------------------------------- READY, STATUS
inside systemctl start tensord || fail "systemctl start tensord"
[[ $(show ActiveState)/$(show SubState) == active/running ]] || fail "tensord is $(show ActiveState)/$(show SubState)"
ok "Type=notify: systemctl start returned after READY=1 (active/running, pid $(show MainPID))"
status=$(show StatusText)
[[ $status == "127.0.0.1:7450: 0 connections, 0 tensors (0 named), "* ]] || fail "unexpected STATUS: $status"
ok "STATUS: $status"

/usr/bin/python3 -c "
import numpy as np
rng = np.random.default_rng(7)
np.save('$work/w.npy', rng.standard_normal((256, 64), dtype=np.float32))
np.save('$work/h.npy', rng.standard_normal(1000).astype(np.float16))"
ctl put w "$work/w.npy" >/dev/null || fail "tensorctl put w"
ctl put h "$work/h.npy" >/dev/null || fail "tensorctl put h"
ctl call relu w --out r >/dev/null || fail "tensorctl call relu"
ctl get r "$work/r.npy" >/dev/null || fail "tensorctl get r"  # its work has completed once read
has_status() { [[ $(show StatusText) == *"3 tensors (3 named)"* ]]; }
eventually has_status || fail "STATUS did not follow the load: $(show StatusText)"
ok "STATUS follows the load: $(show StatusText)"

# ---------------------------------------------------------------- stat, metrics
stat=$(ctl stat) || fail "tensorctl stat"
grep -q "^local " <<<"$stat" || fail "tensorctl stat shows no row for principal local: $stat"
grep -q "^relu " <<<"$stat" || fail "tensorctl stat shows no row for relu: $stat"
ok "tensorctl stat answers through the unit (principal local, op relu)"
echo "$stat" | sed 's/^/#   /'
scrape=$(inside /usr/bin/python3 "$source/tests/integration/metrics_scrape.py" 127.0.0.1:9450) ||
  fail "the metrics endpoint did not parse: $scrape"
/usr/bin/python3 -c "
import json, sys
s = json.loads(sys.argv[1])['samples']
assert s['tensord_named_tensors'] == 3, s['tensord_named_tensors']
assert s['tensord_ops_total{op=\"relu\",result=\"ok\"}'] == 1
" "$scrape" || fail "unexpected metrics: $scrape"
ok "http://127.0.0.1:9450/metrics parses with prometheus_client (3 named tensors, 1 relu)"

# ---------------------------------------------------------------- reload, watchdog
main=$(show MainPID)
inside systemctl reload tensord || fail "systemctl reload tensord"
[[ $(show ActiveState) == active && $(show MainPID) == "$main" ]] || fail "reload restarted or stopped the daemon"
reloaded() { journal | grep -q "^reloaded /etc/tensord/tensord.json"; }
eventually reloaded || fail "the daemon did not re-read its config"
ok "systemctl reload: SIGHUP re-read the config, RELOADING=1/READY=1, same pid $main"

first=$(show WatchdogTimestampMonotonic)
advanced() { [[ $(show WatchdogTimestampMonotonic) -gt $first ]]; }
eventually advanced || fail "no WATCHDOG=1 ping within 30 s (WatchdogSec=4s)"
ok "WATCHDOG=1 pings arrive (WatchdogTimestampMonotonic $first -> $(show WatchdogTimestampMonotonic))"

# ---------------------------------------------------------------- stop, start: tensors survive
inside systemctl stop tensord || fail "systemctl stop tensord"
[[ $(show ActiveState) == inactive ]] || fail "tensord is $(show ActiveState) after stop"
drained() { journal | grep -q "stopped: "; }
eventually drained || fail "no 'stopped:' line: the daemon did not drain and exit"
[[ $(show ExecMainStatus) == 0 ]] || fail "tensord exited with status $(show ExecMainStatus) on stop"
ok "systemctl stop: drained, saved the named tensors into /var/lib/tensord, exited 0"
inside systemctl start tensord || fail "systemctl start tensord (after stop)"
same() {
  ctl get "$1" "$work/$1.out.npy" >/dev/null || return 1
  /usr/bin/python3 -c "
import numpy as np, sys
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
sys.exit(0 if a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes() else 1)" "$work/$1.npy" "$work/$1.out.npy"
}
same w || fail "w did not survive stop and start bit-exact"
same h || fail "h did not survive stop and start bit-exact"
ok "stop + start: named tensors w (f32) and h (f16) restored bit-exact"
inside systemctl restart tensord || fail "systemctl restart tensord"
same w || fail "w did not survive a restart bit-exact"
ok "systemctl restart: w restored bit-exact (pid $(show MainPID))"

# ---------------------------------------------------------------- watchdog timeout
hung=$(show MainPID)
inside kill -STOP "$hung"  # a PID of the namespace, as systemctl shows it
restarted() { [[ $(show MainPID) != "$hung" && $(show MainPID) != 0 && $(show ActiveState) == active ]]; }
eventually restarted || fail "a hung daemon was not killed by the watchdog and restarted"
timed_out() { journal | grep -q "Watchdog timeout"; }
eventually timed_out || fail "no watchdog timeout in the journal"
[[ $(show NRestarts) -ge 1 ]] || fail "NRestarts is $(show NRestarts)"
same w || fail "w did not survive the watchdog restart"
ok "watchdog: a stopped (hung) daemon was killed on timeout and restarted (pid $hung -> $(show MainPID)); w intact"

# ---------------------------------------------------------------- socket activation
inside systemctl stop tensord
inside systemctl start tensord.socket || fail "systemctl start tensord.socket"
[[ $(show ActiveState) == inactive ]] || fail "tensord started before any connection"
ctl info >/dev/null || fail "tensorctl info through tensord.socket"
[[ $(show ActiveState) == active ]] || fail "the connection did not start tensord"
took_socket() { journal | grep -q "socket passed by systemd"; }
eventually took_socket || fail "the daemon did not take the passed socket"
same w || fail "w is not there under socket activation"
ok "tensord.socket: the first connection started tensord, which took the passed socket"
inside systemctl stop tensord.socket tensord

# ---------------------------------------------------------------- journal
prio=$(inside journalctl -u tensord --no-pager -o verbose --grep "listening on 127.0.0.1:7450" -n 1 | grep -o "PRIORITY=[0-9]" || true)
[[ $prio == PRIORITY=6 ]] || fail "journal priority of an info line is '$prio', expected PRIORITY=6"
if journal | grep -qE '^\[?[0-9]{4}-[0-9]{2}-[0-9]{2}'; then fail "journal lines carry their own timestamps"; fi
ok "journal: priorities from the <N> prefixes (info = 6), no duplicate timestamps"

echo "# journalctl -u tensord (last 12 lines):"
journal -n 12 | sed 's/^/#   /'
echo "PASS: $checks checks"
