"""Groups and collectives from Python against real daemons: three tensord
processes on ephemeral loopback ports that dial each other with a node token
form groups (form_group from one thread, group_create from a thread per
member), run every collective against NumPy (f32, and f16), report errors
with the daemon's message (unknown and broken groups, shapes that differ
between members, a bad op), and a two-daemon DistributedDataParallel step
keeps the replicas identical."""

import hashlib
import itertools
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import tensord
from conftest import PRINCIPAL, TOKEN, Daemon, source_dir
from tensord import distributed as dist
from tensord import nn

NODE_TOKEN = "python-node-token"
TIMEOUT_MS = 8000


def cluster_config():
    """Each member accepts the test's token and the node token, and dials the
    others with the node token."""
    def entry(principal, token):
        return {"principal": principal, "token_sha256": hashlib.sha256(token.encode()).hexdigest()}

    return {"auth": {"tokens": [entry(PRINCIPAL, TOKEN), entry("node", NODE_TOKEN)]},
            "groups": {"timeout_ms": TIMEOUT_MS, "node_credentials": {"token": NODE_TOKEN}}}


def start_daemons(n):
    daemons, errors = [None] * n, []

    def start(i):
        try:
            daemons[i] = Daemon(extra=cluster_config())
        except Exception as error:  # reported below, with the others stopped
            errors.append(error)

    threads = [threading.Thread(target=start, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        for d in daemons:
            if d is not None:
                d.stop()
        raise errors[0]
    return daemons


@pytest.fixture(scope="module")
def daemons():
    started = start_daemons(3)
    yield started
    for d in started:
        d.stop()


@pytest.fixture(scope="module")
def clients(daemons):
    return [d.connect() for d in daemons]


_names = itertools.count()


@pytest.fixture
def group(clients):
    """A fresh group of all three members per test, so that a test that fails
    half-way leaves no collective unmatched for the next one."""
    name = f"g{next(_names)}"
    dist.form_group(clients, name)
    yield name
    for c in clients:
        if any(g.name == name for g in c.group_list()):
            c.group_delete(name)


def rng(seed):
    return np.random.default_rng(seed)


def test_form_group_and_group_list(clients, daemons):
    infos = dist.form_group(clients, "listed", timeout_ms=5000)
    members = [d.address for d in daemons]
    assert [i.rank for i in infos] == [0, 1, 2]
    for rank, (c, info) in enumerate(zip(clients, infos)):
        assert (info.name, info.size, info.members, info.state, info.ready) == ("listed", 3, members, "ready", True)
        (listed,) = [g for g in c.group_list() if g.name == "listed"]
        assert (listed.rank, listed.size, listed.members, listed.origin) == (rank, 3, members, PRINCIPAL)
        assert listed.as_dict()["members"] == members
        text = repr(listed)
        assert text.startswith("GroupInfo(name='listed', rank=") and "size=3" in text and "state='ready'" in text
        assert members[0] in text
    for c in clients:
        c.group_delete("listed")
    assert all(g.name != "listed" for c in clients for g in c.group_list())


def test_group_create_from_a_thread_per_member(daemons):
    members = [d.address for d in daemons]
    results, errors = [None] * 3, [None] * 3
    # A member that deletes the group while another is still forming it
    # takes its links away from under that one: delete once all are ready.
    formed = threading.Barrier(3, timeout=60)

    def join(rank):
        try:
            c = daemons[rank].connect()  # a client belongs to its thread
            try:
                results[rank] = c.group_create("threads", members)  # rank: this client's place in members
            finally:
                formed.wait()
            c.group_delete("threads")
        except Exception as error:
            errors[rank] = error

    threads = [threading.Thread(target=join, args=(r,)) for r in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [None] * 3
    assert [(r.rank, r.size, r.state) for r in results] == [(0, 3, "ready"), (1, 3, "ready"), (2, 3, "ready")]


def test_group_create_checks_its_arguments(clients, daemons):
    with pytest.raises(ValueError, match="rank not given.*not among members"):
        clients[0].group_create("x", [daemons[1].address, daemons[2].address])
    with pytest.raises(ValueError, match=r"rank must be an int in \[0, 2\); got 5"):
        clients[0].group_create("x", [daemons[0].address, daemons[1].address], rank=5)
    # The other member is never asked: the daemon gives up, naming it.
    with pytest.raises(tensord.Refused) as error:
        clients[0].group_create("lonely", [daemons[0].address, daemons[1].address], timeout_ms=1000)
    message = str(error.value)
    assert "groupCreate lonely" in message and f"rank 1 ({daemons[1].address})" in message
    assert "has not linked to this daemon" in message
    (lonely,) = [g for g in clients[0].group_list() if g.name == "lonely"]
    assert lonely.state.startswith("broken: ") and not lonely.ready
    clients[0].group_delete("lonely")


def test_allreduce_every_op_against_numpy(clients, group):
    for op, combine in [("sum", np.sum), ("mean", np.mean), ("max", np.max), ("min", np.min)]:
        values = [rng(10 + r).uniform(-2, 2, (3, 5)).astype(np.float32) for r in range(3)]
        inputs = [c.tensor(v) for c, v in zip(clients, values)]
        before = [c.stats().round_trips for c in clients]
        outputs = [c.allreduce(x, group, op=op) for c, x in zip(clients, inputs)]
        doubled = [y + y for y in outputs]  # a result feeds a further call before it exists
        assert [c.stats().round_trips for c in clients] == before, "collectives must not wait"
        want = combine(np.stack(values), axis=0)
        for r in range(3):
            assert isinstance(outputs[r], tensord.Tensor)
            np.testing.assert_allclose(outputs[r].numpy(), want, rtol=1e-6, atol=1e-6, err_msg=f"{op} rank {r}")
            np.testing.assert_allclose(doubled[r].numpy(), 2 * want, rtol=1e-6, atol=1e-6)
            np.testing.assert_array_equal(inputs[r].numpy(), values[r])  # not in place: input unchanged
        # Every member holds the same bits.
        assert all(np.array_equal(outputs[0].numpy(), y.numpy()) for y in outputs[1:])


def test_allreduce_f16_bucket_in_place_and_named(clients, group):
    # f16 mean: inputs rounded to f16, the mean of the rounded values.
    halves = [rng(20 + r).uniform(-2, 2, 33).astype(np.float16) for r in range(3)]
    outputs = [c.allreduce(c.from_numpy(h), group, op="mean") for c, h in zip(clients, halves)]
    want = np.mean(np.stack(halves).astype(np.float64), axis=0)
    for y in outputs:
        got = y.numpy()
        assert got.dtype == np.float16 and y.dtype is tensord.float16
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-3, atol=2e-3)

    # A bucket of two tensors of different dtypes, in place: results are the inputs.
    a = [c.tensor(np.full(4, r + 1, np.float32)) for r, c in enumerate(clients)]
    b = [c.tensor(np.full((2, 2), 10 * (r + 1), np.float16)) for r, c in enumerate(clients)]
    results = [c.allreduce([x, y], group, in_place=True) for c, x, y in zip(clients, a, b)]
    for r in range(3):
        assert isinstance(results[r], list) and len(results[r]) == 2
        np.testing.assert_array_equal(a[r].numpy(), np.full(4, 6, np.float32))
        np.testing.assert_array_equal(b[r].numpy(), np.full((2, 2), 60, np.float16))
        np.testing.assert_array_equal(results[r][1].numpy(), np.full((2, 2), 60, np.float16))

    # Named tensors by name, in place (as tensorctl allreduce does).
    for r, c in enumerate(clients):
        c.tensor(np.array([r, 2.0 * r], np.float32)).save("pycoll/w", overwrite=True)
    named = [c.allreduce("pycoll/w", group, op="max", in_place=True) for c in clients]
    for c, y in zip(clients, named):
        np.testing.assert_array_equal(y.numpy(), [2, 4])
        np.testing.assert_array_equal(c.restore("pycoll/w").numpy(), [2, 4])
        c.rm("pycoll/w")


def test_broadcast_allgather_reduce_scatter(clients, group):
    values = [rng(30 + r).standard_normal((2, 3)).astype(np.float32) for r in range(3)]
    inputs = [c.tensor(v) for c, v in zip(clients, values)]
    sent = [c.broadcast(x, group, root=2) for c, x in zip(clients, inputs)]
    gathered = [c.allgather(x, group) for c, x in zip(clients, inputs)]
    rows = [rng(40 + r).standard_normal((6, 2)).astype(np.float32) for r in range(3)]
    scattered = [c.reduce_scatter(c.tensor(v), group, op="sum") for c, v in zip(clients, rows)]
    total = np.sum(np.stack(rows), axis=0)
    for r in range(3):
        np.testing.assert_array_equal(sent[r].numpy(), values[2])
        assert gathered[r].shape == (3, 2, 3)
        np.testing.assert_array_equal(gathered[r].numpy(), np.stack(values))
        assert scattered[r].shape == (2, 2)
        np.testing.assert_allclose(scattered[r].numpy(), total[2 * r:2 * r + 2], rtol=1e-6, atol=1e-6)

    # broadcast in place over a list: every member ends with rank 0's values.
    lists = [[c.tensor(np.full(3, r, np.float32)), c.tensor(np.full(2, -r, np.int32))] for r, c in enumerate(clients)]
    for c, ts in zip(clients, lists):
        c.broadcast(ts, group, root=0, in_place=True)
    for ts in lists:
        np.testing.assert_array_equal(ts[0].numpy(), [0, 0, 0])
        np.testing.assert_array_equal(ts[1].numpy(), [0, 0])


def test_barrier(clients, group):
    # From one thread: the others' barriers are issued first (async_op), so
    # the blocking one on client 0 meets them.
    works = [c.barrier(group, async_op=True) for c in clients[1:]]
    assert clients[0].barrier(group) is None
    for w in works:
        w.wait()
        assert w.waited
    info = [g for g in clients[0].group_list() if g.name == group][0]
    assert info.collectives == 1


def test_process_group(clients, group):
    groups = [dist.ProcessGroup(c, group, timeout_ms=5000) for c in clients]
    assert [(g.rank, g.size, g.name) for g in groups] == [(0, 3, group), (1, 3, group), (2, 3, group)]
    assert repr(groups[1]).startswith(f"ProcessGroup({group!r}, rank=1, size=3")
    x = [c.tensor([float(r), 1.0]) for r, c in enumerate(clients)]
    sums = [g.allreduce(t) for g, t in zip(groups, x)]
    gathered = [g.allgather(t) for g, t in zip(groups, x)]
    for s, a in zip(sums, gathered):
        np.testing.assert_array_equal(s.numpy(), [3, 3])
        np.testing.assert_array_equal(a.numpy(), [[0, 1], [1, 1], [2, 1]])
    works = [g.barrier(async_op=True) for g in groups]
    for w in works:
        w.wait()
    with pytest.raises(tensord.Refused, match="no group 'nope'.*its groups: .*" + group):
        dist.ProcessGroup(clients[0], "nope")

    # A group belongs to its client's thread, as the client does.
    errors = []

    def elsewhere():
        try:
            groups[0].allreduce(x[0])
        except tensord.ThreadError as error:
            errors.append(str(error))

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert len(errors) == 1 and "allreduce on group" in errors[0] and "belongs to thread" in errors[0]


def test_unknown_group_bad_op_and_mismatched_shapes(clients, group):
    with pytest.raises(tensord.Refused, match="nope") as error:
        clients[0].allreduce(clients[0].tensor([1.0]), "nope").numpy()
    assert "group" in str(error.value)
    with pytest.raises(tensord.Refused, match="barrier: no group named 'nope'"):
        clients[0].barrier("nope")
    work = clients[0].barrier("nope", async_op=True)
    with pytest.raises(tensord.Refused, match="barrier: no group named 'nope'"):
        work.wait()
    # Dropped unwaited, its error is not lost: a later request that waits
    # raises it (the next one, unless that one's answer overtook it), once.
    clients[0].barrier("nope", async_op=True)
    raised = []
    for _ in range(5):
        try:
            clients[0].group_list()
        except tensord.Refused as error:
            raised.append(str(error))
    assert len(raised) == 1 and "barrier: no group named 'nope'" in raised[0]

    # A bad reduction, issued on every member: each reports it.
    bad = [c.allreduce(c.tensor([1.0, 2.0]), group, op="avg") for c in clients]
    for y in bad:
        with pytest.raises(tensord.Refused, match="allreduce: attribute 'op' expected one of sum, mean, max, min "
                                                  r"\(text\), got 'avg'"):
            y.numpy()

    # Shapes that differ between members: every member fails, naming both.
    shapes = [(4, 4), (4, 3), (4, 4)]
    mismatched = [c.allreduce(c.tensor(np.ones(s, np.float32)), group) for c, s in zip(clients, shapes)]
    for y in mismatched:
        with pytest.raises(tensord.Refused) as error:
            y.wait()
        assert "allreduce on group " + group in str(error.value)
        assert "f32[4, 3]" in str(error.value) and "f32[4, 4]" in str(error.value)

    # The group goes on.
    ok = [c.allreduce(c.tensor([1.0]), group) for c in clients]
    assert [y.item() for y in ok] == [3.0, 3.0, 3.0]

    # Client-side checks name the argument.
    with pytest.raises(TypeError, match="tensor 0 is int"):
        clients[0].allreduce([1], group)
    with pytest.raises(ValueError, match="belongs to another tensord Client"):
        clients[0].allreduce(clients[1].tensor([1.0]), group)
    with pytest.raises(ValueError, match="root must be a rank"):
        clients[0].broadcast(clients[0].tensor([1.0]), group, root=-1)


def test_a_member_that_dies_breaks_the_group(clients):
    extra = start_daemons(1)[0]
    try:
        other = extra.connect()
        dist.form_group([clients[0], other], "fragile", timeout_ms=5000)
        x = clients[0].tensor([1.0, 2.0])
        extra.process.kill()
        extra.process.wait()
        with pytest.raises(tensord.Refused) as error:
            clients[0].allreduce(x, "fragile", in_place=True, timeout_ms=1500).wait()
        message = str(error.value)
        assert "allreduce on group fragile" in message and "rank 1" in message
        np.testing.assert_array_equal(x.numpy(), [1, 2])  # in place, failed: unchanged
        deadline = time.monotonic() + 10
        state = ""
        while time.monotonic() < deadline:
            state = [g for g in clients[0].group_list() if g.name == "fragile"][0].state
            if state.startswith("broken: "):
                break
            time.sleep(0.05)
        assert state.startswith("broken: ")
        with pytest.raises(tensord.Refused, match="fragile.*broken"):
            clients[0].allreduce(x, "fragile").numpy()
        clients[0].group_delete("fragile")
    finally:
        extra.stop()
    assert clients[0].tensor([5.0]).item() == 5.0  # the daemon serves on


class TwoLayer(nn.Module):
    def __init__(self, client):
        super().__init__()
        self.a = nn.Linear(3, 4, client=client)
        self.b = nn.Linear(4, 2, client=client)

    def forward(self, x):
        return self.b(self.a(x).relu())


def test_ddp_step_keeps_replicas_identical(clients, daemons):
    pair = clients[:2]
    dist.form_group(pair, "ddp")
    groups = [dist.ProcessGroup(c, "ddp") for c in pair]
    tensord.manual_seed(1)
    models = [TwoLayer(c) for c in pair]  # different initial values on each member
    assert not np.array_equal(models[0].a.weight.numpy(), models[1].a.weight.numpy())
    ddps = [dist.DistributedDataParallel(m, g, bucket_bytes=1) for m, g in zip(models, groups)]
    assert ddps[0].buckets == [[3], [2], [1], [0]]  # reverse parameter order, a bucket per parameter
    start = [[p.numpy() for p in m.parameters()] for m in models]
    for p0, p1 in zip(*start):
        np.testing.assert_array_equal(p0, p1)  # rank 0's values everywhere

    data = [rng(50 + r).standard_normal((5, 3)).astype(np.float32) for r in range(2)]
    optimizers = [tensord.optim.SGD(m.parameters(), lr=0.1) for m in models]

    # The reference: each member's own gradients, in NumPy.
    def local_grads(x, params):
        wa, ba, wb, bb = params
        h = x @ wa.T + ba
        r = np.maximum(h, 0)
        y = r @ wb.T + bb
        dy = 2 * y  # loss = sum(y * y)
        dwb, dbb = dy.T @ r, dy.sum(0)
        dh = (dy @ wb) * (h > 0)
        return [dh.T @ x, dh.sum(0), dwb, dbb]

    want = [(g0 + g1) / 2 for g0, g1 in zip(local_grads(data[0], start[0]), local_grads(data[1], start[0]))]
    for c, m, ddp, opt, x in zip(pair, models, ddps, optimizers, data):
        opt.zero_grad()
        y = ddp(c.tensor(x))
        (y * y).sum().backward()  # every bucket starts from backward()
        ddp.finish_gradients()
        opt.step()
    for m in models:
        for p, g, p0 in zip(m.parameters(), want, start[0]):
            np.testing.assert_allclose(p.grad.numpy(), g, rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(p.numpy(), p0 - 0.1 * g, rtol=1e-4, atol=1e-5)
    for p0, p1 in zip(models[0].parameters(), models[1].parameters()):
        assert np.array_equal(p0.numpy(), p1.numpy()), "the replicas differ after a step"

    # A second step without overlap: local gradients until sync_gradients().
    for c, m, ddp, opt, x in zip(pair, models, ddps, optimizers, data):
        ddp.overlap = False
        opt.zero_grad()
        y = ddp(c.tensor(x[::-1].copy()))
        (y * y).sum().backward()
    for ddp, opt in zip(ddps, optimizers):
        ddp.sync_gradients()
        opt.step()
    for p0, p1 in zip(models[0].parameters(), models[1].parameters()):
        assert np.array_equal(p0.numpy(), p1.numpy()), "the replicas differ after a second step"

    # From a parameter list (nothing issued without broadcast_parameters).
    listed = dist.DistributedDataParallel(list(models[0].parameters()), groups[0], broadcast_parameters=False)
    assert listed.module is None and listed.buckets == [[3, 2, 1, 0]]  # one 25 MiB bucket
    assert repr(listed) == "DistributedDataParallel(4 parameters, group='ddp', buckets=1)"
    with pytest.raises(TypeError, match="no module to call"):
        listed(pair[0].tensor(data[0]))
    with pytest.raises(TypeError, match="ProcessGroup"):
        dist.DistributedDataParallel(models[0], "ddp")
    with pytest.raises(ValueError, match="parameter 0 is not a leaf that requires grad"):
        dist.DistributedDataParallel([pair[0].tensor([1.0])], groups[0])
    for c in pair:
        c.group_delete("ddp")


def test_readme_collectives_example(clients, daemons):
    text = (source_dir() / "README.md").read_text()
    section = text[text.index("\nCollectives (see Training on several daemons"):]
    code = section[section.index("```python\n") + 10:]
    code = code[:code.index("```")]
    for port, daemon in (("127.0.0.1:7451", daemons[0]), ("127.0.0.1:7452", daemons[1])):
        assert port in code
        code = code.replace(port, daemon.address)
    env = dict(os.environ, TENSORD_TOKEN=TOKEN)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[4. 6.] [4. 6.]", "[True, True]"]
    for c in clients[:2]:
        c.group_delete("g")
