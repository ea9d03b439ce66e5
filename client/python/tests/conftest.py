"""Fixtures: a real tensord from this build, on a free loopback port.

TENSORD_BUILD_DIR (set by ctest) names the build; the daemon is
$TENSORD_BUILD_DIR/server/tensord, started with a config of its own (a
fresh temporary directory, a principal and token of the test's) as the C++
integration tests do (tests/integration/daemon_process.cpp).
"""

import hashlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import threading

import pytest

import tensord

TOKEN = "python-test-token"
PRINCIPAL = "pytester"


def build_dir():
    path = os.environ.get("TENSORD_BUILD_DIR")
    if not path:
        pytest.exit("TENSORD_BUILD_DIR is not set (run the tests through ctest)", returncode=2)
    return pathlib.Path(path)


def source_dir():
    path = os.environ.get("TENSORD_SOURCE_DIR")
    return pathlib.Path(path) if path else pathlib.Path(__file__).resolve().parents[3]


class Daemon:
    """A tensord process with its own config; stop() or the context ends it."""

    def __init__(self, limits=None, extra=None, start_timeout=90):
        binary = build_dir() / "server" / "tensord"
        if not binary.exists():
            raise RuntimeError(f"daemon binary not found: {binary}")
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="tensord-pytest-"))
        self.token = TOKEN
        self.principal = PRINCIPAL
        config = {
            "listen": "127.0.0.1:0",
            "state_dir": str(self.dir / "state"),
            "cache_dir": str(self.dir / "cache"),
            "log_level": "info",
            "metrics": {"listen": "127.0.0.1:0"},  # never a fixed port: suites run side by side
            "auth": {"tokens": [{"principal": PRINCIPAL, "token_sha256": hashlib.sha256(TOKEN.encode()).hexdigest()}]},
        }
        if limits:
            config["limits"] = limits
        config.update(extra or {})
        (self.dir / "tensord.json").write_text(json.dumps(config, indent=2))
        self.process = subprocess.Popen([str(binary), "--config", str(self.dir / "tensord.json"), "--listen",
                                         "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.log = []
        self.address = None
        ready = threading.Event()

        def drain():  # reads the log (the daemon must never block on a full pipe)
            for raw in self.process.stdout:
                line = raw.decode(errors="replace")
                self.log.append(line)
                if self.address is None and "listening on " in line:
                    self.address = line.split("listening on ", 1)[1].split()[0]
                    ready.set()
            ready.set()

        self._drain = threading.Thread(target=drain, daemon=True)
        self._drain.start()
        if not ready.wait(start_timeout) or self.address is None:
            self.stop()
            raise RuntimeError("tensord did not start; its log:\n" + "".join(self.log))

    def connect(self, **kwargs):
        return tensord.connect(self.address, self.token, **kwargs)

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._drain.join(10)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def daemon():
    d = Daemon()
    yield d
    d.stop()


@pytest.fixture(scope="module")
def client(daemon):
    return daemon.connect()

