"""tensord.distributed: groups of daemons, collectives, data-parallel training.

Daemons form a group and run collectives between themselves on tensors they
hold; the data never passes through the client. Every member of a group must
issue the same collectives in the same order (the Nth on one member meets the
Nth on the others).

    import tensord
    from tensord import distributed as dist

    a, b = tensord.connect("10.0.0.1:7450"), tensord.connect("10.0.0.2:7450")
    dist.form_group([a, b], "g")                  # both members at once, from one thread
    x, y = a.tensor([1., 2.]), b.tensor([3., 4.])
    sx, sy = a.allreduce(x, "g"), b.allreduce(y, "g")   # pipelined: issued on both, no wait
    print(sx.numpy(), sy.numpy())                 # [4. 6.] [4. 6.]

A process per member calls Client.group_create(name, members) on its own
daemon instead (each blocks until every member joined). ProcessGroup is one
member's view of a group with the collectives as methods;
DistributedDataParallel keeps a model's gradients averaged over the group.
"""

from . import _core
from ._tensor import Tensor

GroupInfo = _core.GroupInfo
CollectiveWork = _core.CollectiveWork


def _timeout(timeout_ms, who):
    if timeout_ms is None:
        return 0
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or not 0 < timeout_ms < 1 << 32:
        raise ValueError(f"{who}: timeout_ms must be a positive number of milliseconds; got {timeout_ms!r}")
    return timeout_ms


def _group_name(group, who):
    """(name, timeout_ms or None) of a group given by name or ProcessGroup."""
    if isinstance(group, ProcessGroup):
        return group.name, group.timeout_ms
    if not isinstance(group, str) or not group:
        raise TypeError(f"{who}: group must be a group's name (a non-empty str) or a ProcessGroup; "
                        f"got {group!r}")
    return group, None


def _inputs(client, tensors, who):
    """(handles, single) for a Tensor, a tensor name or a list of them; names
    are restored (pipelined) on `client`."""
    single = isinstance(tensors, (Tensor, str))
    items = [tensors] if single else list(tensors) if isinstance(tensors, (list, tuple)) else None
    if items is None:
        raise TypeError(f"{who}: expected a tensord.Tensor, a tensor name (str) or a list of them; "
                        f"got {type(tensors).__name__}")
    if not items:
        raise ValueError(f"{who}: got no tensors")
    out = []
    for i, t in enumerate(items):
        if isinstance(t, str):
            t = client.restore(t)
        elif not isinstance(t, Tensor):
            raise TypeError(f"{who}: tensor {i} is {type(t).__name__}; expected a tensord.Tensor or a tensor "
                            "name (str)")
        elif t.client is not client:
            raise ValueError(f"{who}: tensor {i} belongs to another tensord Client ({t.client.address}); a "
                             f"collective runs on tensors of the daemon it is issued on ({client.address})")
        out.append(t)
    return out, single


def _run(client, group, kind, tensors, attrs, timeout_ms):
    """Issues collective `kind`; returns (outputs as Tensors, work)."""
    who = f"{kind}(group={group!r})" if isinstance(group, str) else f"{kind}"
    name, group_timeout = _group_name(group, who)
    timeout = _timeout(timeout_ms, who) or group_timeout
    if timeout:
        attrs = attrs + [("timeout_ms", timeout)]
    handles = [t._h for t in tensors]
    outputs, work = client._c.collective(name, kind, handles, attrs)
    return [Tensor(h, client) for h in outputs], work


def _check_op(op, who):
    if not isinstance(op, str):
        raise TypeError(f"{who}: op must be a str ('sum', 'mean', 'max' or 'min'); got {type(op).__name__}")
    return op


def _allreduce(client, tensors, group, op="sum", *, in_place=False, timeout_ms=None):
    """See Client.allreduce."""
    items, single = _inputs(client, tensors, "allreduce")
    outputs, _ = _run(client, group, "allreduce", items,
                      [("op", _check_op(op, "allreduce")), ("in_place", bool(in_place))], timeout_ms)
    return outputs[0] if single else outputs


def _broadcast(client, tensors, group, root=0, *, in_place=False, timeout_ms=None):
    """See Client.broadcast."""
    if isinstance(root, bool) or not isinstance(root, int) or root < 0:
        raise ValueError(f"broadcast: root must be a rank (an int >= 0); got {root!r}")
    items, single = _inputs(client, tensors, "broadcast")
    outputs, _ = _run(client, group, "broadcast", items, [("root", root), ("in_place", bool(in_place))],
                      timeout_ms)
    return outputs[0] if single else outputs


def _one(client, tensor, who):
    if isinstance(tensor, (list, tuple)):
        raise TypeError(f"{who}: takes one tensor (or tensor name); got a {type(tensor).__name__}")
    return _inputs(client, tensor, who)[0]


def _allgather(client, tensor, group, *, timeout_ms=None):
    """See Client.allgather."""
    return _run(client, group, "allgather", _one(client, tensor, "allgather"), [], timeout_ms)[0][0]


def _reduce_scatter(client, tensor, group, op="sum", *, timeout_ms=None):
    """See Client.reduce_scatter."""
    items = _one(client, tensor, "reduce_scatter")
    return _run(client, group, "reduce_scatter", items, [("op", _check_op(op, "reduce_scatter"))], timeout_ms)[0][0]


def _barrier(client, group, *, timeout_ms=None, async_op=False):
    """See Client.barrier."""
    _, work = _run(client, group, "barrier", [], [], timeout_ms)
    if async_op:
        return work
    work.wait()
    return None


def form_group(clients, name, members=None, timeout_ms=None):
    """Forms group `name` on every daemon of `clients` at once: clients[i]'s
    daemon joins as rank i. `members`: HOST:PORT (tls://HOST:PORT for TLS
    node links) of each daemon's listener as the other daemons reach it, by
    rank; default: each client's own address. The clients must belong to
    this thread; all requests go out before any is awaited, so the members
    meet. Blocks until every member answered; returns each member's
    GroupInfo. Raises the first failing member's error, naming it. Needs
    the &group:create right on every daemon; a group of the same name is
    replaced."""
    from ._client import Client

    clients = list(clients)
    for i, c in enumerate(clients):
        if not isinstance(c, Client):
            raise TypeError(f"form_group: client {i} is {type(c).__name__}; expected a tensord.Client")
    members = [c.address for c in clients] if members is None else list(members)
    return _core.form_group([c._c for c in clients], name, members, _timeout(timeout_ms, "form_group"))


class ProcessGroup:
    """One member's view of group `name`: the client connected to that member
    and the collectives as methods (as torch.distributed's process group).

        group = ProcessGroup(client, "g")      # formed by form_group, group_create or tensorctl
        total = group.allreduce(x)             # pipelined; x stays as it was
        group.allreduce([w, b], op="mean", in_place=True)

    Asks the daemon for the group at construction (raises tensord.Refused,
    naming the daemon's groups, when it has none of that name); rank, size
    and info are as of then. timeout_ms (None: the daemon's
    groups.timeout_ms) applies to every collective issued through it,
    DistributedDataParallel's included."""

    def __init__(self, client, name, timeout_ms=None):
        self.client = client
        self._core = _core.ProcessGroup(client._c, name)
        self._timeout_ms = None
        self.timeout_ms = timeout_ms

    @property
    def name(self):
        return self._core.name

    @property
    def rank(self):
        """This member's rank."""
        return self._core.rank

    @property
    def size(self):
        """The number of members."""
        return self._core.size

    @property
    def info(self):
        """The GroupInfo as of construction (Client.group_list() for a fresh one)."""
        return self._core.info

    @property
    def timeout_ms(self):
        """The timeout of each collective in ms, or None for the daemon's default."""
        return self._timeout_ms

    @timeout_ms.setter
    def timeout_ms(self, value):
        self._core.set_timeout_ms(_timeout(value, "ProcessGroup.timeout_ms"))
        self._timeout_ms = value

    def __repr__(self):
        return f"ProcessGroup({self.name!r}, rank={self.rank}, size={self.size}, client={self.client.address!r})"

    def allreduce(self, tensors, op="sum", *, in_place=False):
        """Client.allreduce over this group."""
        return _allreduce(self.client, tensors, self, op, in_place=in_place)

    def broadcast(self, tensors, root=0, *, in_place=False):
        """Client.broadcast over this group."""
        return _broadcast(self.client, tensors, self, root, in_place=in_place)

    def allgather(self, tensor):
        """Client.allgather over this group."""
        return _allgather(self.client, tensor, self)

    def reduce_scatter(self, tensor, op="sum"):
        """Client.reduce_scatter over this group."""
        return _reduce_scatter(self.client, tensor, self, op)

    def barrier(self, *, async_op=False):
        """Client.barrier over this group."""
        return _barrier(self.client, self, async_op=async_op)


class DistributedDataParallel:
    """Keeps the gradients of a model's parameters averaged over a group, as
    torch.nn.parallel.DistributedDataParallel: each member's daemon holds a
    replica of the model and trains it on its shard of the data.

        group = dist.ProcessGroup(client, "g")
        model = dist.DistributedDataParallel(nn.Linear(8, 4, client=client), group)
        opt = tensord.optim.SGD(model.parameters(), lr=0.1)
        for x, y in shard:
            opt.zero_grad()
            ops.mse_loss(model(x), y).backward()   # full buckets start their all-reduce from backward()
            model.finish_gradients()               # the rest; every .grad is now the mean over the group
            opt.step()

    `module`: an nn.Module (anything with parameters()) or a list of leaf
    tensors that require grad, on the group's client. Calling the wrapper
    calls the module. At construction rank 0's parameter values are copied
    to every member (broadcast_parameters), so the replicas start identical.
    Gradients are all-reduced (mean) in buckets of about `bucket_bytes`,
    filled in reverse parameter order; with `overlap` a bucket starts from
    backward() as soon as its last gradient was issued. Everything is
    pipelined: finish_gradients() returns at once. A parameter without a
    gradient takes part with zeros. finish_gradients() must follow every
    backward() (a second backward before it raises). This is the C++
    client's tensord::DistributedDataParallel."""

    def __init__(self, module, group, *, bucket_bytes=25 << 20, overlap=True, broadcast_parameters=True):
        if not isinstance(group, ProcessGroup):
            raise TypeError(f"DistributedDataParallel: group must be a tensord.distributed.ProcessGroup; got "
                            f"{type(group).__name__}")
        if isinstance(module, Tensor):
            params = [module]
            self.module = None
        elif hasattr(module, "parameters") and callable(module.parameters):
            params = list(module.parameters())
            self.module = module
        else:
            params = list(module)
            self.module = None
        for i, p in enumerate(params):
            if not isinstance(p, Tensor):
                raise TypeError(f"DistributedDataParallel: parameter {i} is {type(p).__name__}; expected a "
                                "tensord.Tensor")
            if not (p.is_leaf and p.requires_grad):
                raise ValueError(f"DistributedDataParallel: parameter {i} is not a leaf that requires grad "
                                 "(make it with requires_grad=True, or call requires_grad_())")
        if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, int) or bucket_bytes <= 0:
            raise ValueError(f"DistributedDataParallel: bucket_bytes must be a positive int; got {bucket_bytes!r}")
        self.group = group
        self._params = params
        self._core = _core.DistributedDataParallel(group._core, [p._h for p in params], bucket_bytes,
                                                   bool(overlap), bool(broadcast_parameters))
        self._overlap = bool(overlap)

    def __call__(self, *args, **kwargs):
        if self.module is None:
            raise TypeError("DistributedDataParallel: made from a parameter list, there is no module to call")
        return self.module(*args, **kwargs)

    forward = __call__

    def parameters(self):
        """The parameters, in order."""
        return iter(self._params)

    def finish_gradients(self):
        """After backward(): issues the all-reduce (mean) of every bucket
        backward() did not start, leaving each parameter's .grad the mean of
        the members' gradients. Pipelined; an error surfaces at the next
        wait (a .grad's numpy(), the optimizer's next read)."""
        self._core.finish_gradients()

    def sync_gradients(self):
        """finish_gradients() for overlap=False: every bucket issued now.
        Raises if backward() already started buckets (overlap on)."""
        self._core.sync_gradients()

    @property
    def overlap(self):
        """Whether buckets start from backward()."""
        return self._overlap

    @overlap.setter
    def overlap(self, on):
        self._core.set_overlap(bool(on))
        self._overlap = bool(on)

    @property
    def buckets(self):
        """Parameter indices per bucket, in the order they fill."""
        return self._core.buckets

    def __repr__(self):
        inner = type(self.module).__name__ if self.module is not None else f"{len(self._params)} parameters"
        return f"DistributedDataParallel({inner}, group={self.group.name!r}, buckets={len(self.buckets)})"


__all__ = ["GroupInfo", "CollectiveWork", "ProcessGroup", "DistributedDataParallel", "form_group"]
