"""Ctrl-C while waiting on a computation (numpy() or item() of a slow chain
of ops, or of a small tensor queued behind it; not a transfer): a separate
Python process starts the chain, gets SIGINT as a terminal's Ctrl-C would
send it, and must raise KeyboardInterrupt promptly and then go on using its
client."""

import os
import select
import signal
import subprocess
import sys
import textwrap
import time

import pytest

# Runs in the child: calibrates a chain of matmuls to take about CHAIN_S
# seconds on this daemon's device, issues it (pipelined), says "waiting",
# then blocks in the method under test.
CHILD = textwrap.dedent("""
    import sys, time
    import numpy as np
    import tensord

    address, token, method = sys.argv[1], sys.argv[2], sys.argv[3]
    CHAIN_S = 4.0
    c = tensord.connect(address, token)
    x = c.tensor(np.full((384, 384), 1.0 / 384, np.float32))

    def chain(n):
        y = x
        for _ in range(n):
            y = y @ x
        return y

    chain(2).sum().item()  # kernels compiled, queue warm
    start = time.monotonic()
    chain(8).sum().item()
    per_matmul = max((time.monotonic() - start) / 8, 1e-4)
    n = min(int(CHAIN_S / per_matmul), 20000)
    y = chain(n).sum()
    behind = c.tensor([5.0]) + 1  # after the chain in the device's queue
    print(f"waiting {n} {n * per_matmul:.2f}", flush=True)
    start = time.monotonic()
    try:
        if method == "numpy":
            y.numpy()
        elif method == "item":
            y.item()
        else:
            behind.numpy()
        print("finished", flush=True)
    except KeyboardInterrupt:
        print(f"interrupted {time.monotonic() - start:.3f}", flush=True)
    # The client goes on: a new call, queued behind the rest of the chain on
    # the device (its time shows the chain was still running).
    start = time.monotonic()
    assert (c.tensor([1.0, 2.0]) * 2).sum().item() == 6.0
    print(f"ok {time.monotonic() - start:.3f}", flush=True)
""")


def read_line(process, timeout):
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    if not ready:
        return None
    return process.stdout.readline().decode().strip()


@pytest.mark.parametrize("method", ["numpy", "item", "behind"])
def test_ctrl_c_interrupts_a_wait_on_computation(daemon, method):
    process = subprocess.Popen([sys.executable, "-c", CHILD, daemon.address, daemon.token, method],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ.copy())
    try:
        line = read_line(process, 60)
        assert line is not None and line.startswith("waiting"), (line, process.stderr.read1().decode())
        expected = float(line.split()[2])
        time.sleep(0.3)  # well inside the wait
        sent = time.monotonic()
        process.send_signal(signal.SIGINT)
        line = read_line(process, 10)
        took = time.monotonic() - sent
        assert line is not None and line.startswith("interrupted"), line
        # Promptly: within the 50 ms polling slices and scheduling noise, far
        # sooner than the chain would have finished.
        assert took < min(2.0, expected / 2), (took, expected)
        line = read_line(process, 60)
        assert line is not None and line.startswith("ok"), line
        # The chain was still running when the wait gave up: the next call
        # waited for the rest of it.
        assert float(line.split()[1]) > 0.5, (line, took, expected)
        assert process.wait(30) == 0, process.stderr.read().decode()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
