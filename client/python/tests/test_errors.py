"""The daemon's errors as Python exceptions: each kind tensord.Error has,
provoked for real, with the daemon's message; the connection goes on after
a refused call."""

import socket

import numpy as np
import pytest

import tensord
from conftest import Daemon


def test_the_exception_hierarchy():
    for kind in (tensord.Refused, tensord.Overloaded, tensord.Disconnected, tensord.Unimplemented,
                 tensord.ThreadError):
        assert issubclass(kind, tensord.Error) and kind.__module__ == "tensord" and kind.__doc__
    assert issubclass(tensord.Error, RuntimeError)


def test_refused_carries_the_daemons_message(client):
    a = client.tensor(np.ones((2, 3), np.float32))
    product = a @ a
    with pytest.raises(tensord.Refused) as error:
        product.numpy()
    message = str(error.value)
    assert "matmul" in message and "[2, 3]" in message
    assert client.tensor([1.0]).item() == 1.0  # the connection goes on
    with pytest.raises(tensord.Refused, match="no-such-name"):
        client.restore("no-such-name").wait()
    with pytest.raises(tensord.Refused, match="index"):
        client.tensor([1.0, 2.0])[client.tensor([5])].numpy()  # out of range, found on the device


def test_unimplemented(client):
    with pytest.raises(tensord.Unimplemented, match="unknown op 'no_such_op'"):
        client.call("no_such_op", client.tensor([1.0])).numpy()


def test_overloaded_and_disconnected():
    daemon = Daemon(limits={"memory_limit_bytes": 1 << 20})
    try:
        client = daemon.connect()
        with pytest.raises(tensord.Overloaded) as error:
            client.from_numpy(np.zeros(2 << 20, np.uint8)).wait()
        assert "memory" in str(error.value)
        x = client.tensor([1.0])  # under the limit: fine
        assert x.item() == 1.0
        daemon.process.kill()
        daemon.process.wait()
        with pytest.raises(tensord.Disconnected, match=f"connection to tensord at {daemon.address} lost"):
            (x + 1).numpy()
    finally:
        daemon.stop()


def test_nothing_listening_is_disconnected():
    with socket.socket() as s:  # a free port, closed again: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(tensord.Disconnected, match=f"cannot connect to tensord at 127.0.0.1:{port}"):
        tensord.connect(f"127.0.0.1:{port}", "token")


def test_a_wrong_token_is_refused(daemon):
    with pytest.raises(tensord.Error, match="authentication with tensord at .* failed"):
        tensord.connect(daemon.address, "not-the-token")


def test_a_missing_tls_file_is_refused(daemon, tmp_path):
    with pytest.raises(tensord.Error, match="cannot read the CA file"):
        tensord.connect("tls://" + daemon.address, daemon.token, ca=str(tmp_path / "missing.pem"))
