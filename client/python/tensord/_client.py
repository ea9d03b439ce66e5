"""tensord.Client and tensord.connect()."""

import numpy as np

from . import _core, _dtypes
from . import distributed as _dist
from ._ops import BoundOps, OpSet, ops, set_default_client
from ._progress import transfer_bar
from ._tensor import Tensor


def _host_array(data, want):
    """(array, dtype to upload it as, dtype to convert to on the daemon or
    None) for `data` and the requested dtype `want` (None: inferred)."""
    if isinstance(data, Tensor):
        raise TypeError("tensor(): got a tensord.Tensor; use x.clone() or x.to(dtype) instead")
    array = np.asarray(data)
    if array.dtype.byteorder not in ("=", "|"):
        array = array.astype(array.dtype.newbyteorder("="))
    have = _dtypes.from_numpy(array.dtype)
    if want is None:
        if have is not None:
            return array, have, None
        kind = array.dtype.kind
        if kind == "f":  # float64 and friends: float32, PyTorch's default dtype
            return array.astype(np.float32), _dtypes.float32, None
        if kind in "iu" and np.can_cast(array.dtype, np.int64):
            return array.astype(np.int64), _dtypes.int64, None
        raise TypeError(f"tensor(): NumPy dtype {array.dtype} has no tensord counterpart (tensord has "
                        f"{', '.join(d.long_name for d in _dtypes.ALL)})")
    if want is have:
        return array, want, None
    if want is _dtypes.bfloat16:
        if array.dtype == np.uint16:
            return array, want, None  # the bits
        if _dtypes.from_numpy(array.dtype) is None and array.dtype.kind not in "fiub":
            raise TypeError(f"tensor(): cannot make bfloat16 from NumPy dtype {array.dtype}")
        if _dtypes._BF16_NUMPY is not None:
            return array.astype(_dtypes._BF16_NUMPY), want, None
        # No NumPy bfloat16: upload as float32 and round on the daemon.
        return array.astype(np.float32), _dtypes.float32, want
    return array.astype(want.numpy), want, None


class _Batch:
    """Client.batch()'s context manager."""

    def __init__(self, core_client):
        self._scope = _core.BatchScope(core_client)

    def __enter__(self):
        self._scope.enter()
        return self

    def __exit__(self, *exc):
        self._scope.exit()
        return False

    def send(self):
        """Sends what the block holds so far; the block stays open."""
        self._scope.send()


class Graph:
    """Calls captured once by Client.capture and run many times.

    Each run is one request to the daemon and one piece of device work; the
    daemon checked the calls at capture and fused each run of elementwise
    calls into one kernel. graph(*inputs) returns what the captured function
    returned (a Tensor or a tuple of them), pipelined like any call.
    """

    def __init__(self, core_graph, client, single):
        self._g = core_graph
        self._client = client
        self._single = single

    def __call__(self, *inputs):
        for i, t in enumerate(inputs):
            if not isinstance(t, Tensor):
                raise TypeError(f"Graph: input {i} is {type(t).__name__}; expected a tensord.Tensor")
        if len(inputs) != self._g.inputs:
            raise TypeError(f"Graph: {len(inputs)} input(s); the graph takes {self._g.inputs}")
        out = [Tensor(h, self._client) for h in self._g.run([t._h for t in inputs])]
        if self._single is None:
            return None
        return out[0] if self._single else tuple(out)

    run = __call__

    @property
    def calls(self):
        """How many calls were captured."""
        return self._g.calls

    def kernels(self):
        """How many kernels a run records, as the daemon planned them (views
        record none; elementwise calls on one shape share one). Asks the
        daemon."""
        return self._g.kernels()

    def __repr__(self):
        return f"tensord.Graph(inputs={self._g.inputs}, outputs={self._g.outputs}, calls={self._g.calls})"


class Client:
    """A connection to a tensord daemon.

    tensord.connect() makes one with tensorctl's defaults. Tensors live in the
    daemon; calls on them are pipelined (see tensord.Tensor).

    Thread rule: a Client and every tensor it made belong to the thread that
    created the Client (the C++ client's event loop is per thread). Using
    them from another thread raises tensord.ThreadError; connect in each
    thread instead. Waiting on the network releases the GIL, so other Python
    threads run meanwhile.
    """

    def __init__(self, address=None, token=None, *, ca=None, cert=None, key=None):
        """Connects and authenticates. Each argument left None comes from the
        environment (TENSORD_ADDR, TENSORD_TOKEN, TENSORD_CA, TENSORD_CERT,
        TENSORD_KEY), else the credentials file
        ($XDG_CONFIG_HOME/tensord/credentials or
        ~/.config/tensord/credentials), else the defaults: 127.0.0.1:7450
        with token 'tensord-local' (none with a client certificate).
        address: HOST:PORT, or tls://HOST:PORT for TLS. token='' with
        cert/key authenticates by the client certificate. Raises
        tensord.Disconnected when the daemon cannot be reached, or the
        daemon's error when it refuses the credential."""
        self._c = _core.Client(address, token, ca, cert, key)
        self._opset = OpSet(self._c.ops())
        self.ops = BoundOps(self)
        ops._install(self._opset)
        set_default_client(self)

    def __repr__(self):
        return f"tensord.Client({self.address!r})"

    @property
    def address(self):
        """The daemon's address, as connected to."""
        return self._c.address

    def batch(self):
        """A context manager: the calls made through this client inside it
        that have outputs are held and sent to the daemon together, as one
        message, when the block ends (or when anything is read, waited for
        or sent otherwise, and every 256 calls), so a chain of small ops
        costs about one round trip instead of one message per call. Each
        call still runs and fails as on its own; its error is raised where
        its result is read. Blocks nest. `with client.batch() as b:` gives
        b.send() to send what is held so far.

            with client.batch():
                for _ in range(100):
                    x = x + one
        """
        return _Batch(self._c)

    def capture(self, fn, *inputs):
        """Captures the calls `fn` makes on placeholder tensors into a Graph
        that runs them on real ones. `inputs` gives each placeholder's
        (dtype, shape). fn returns a Tensor, a sequence of them, or None,
        made by its calls; tensors it uses that existed before (weights) are
        read by every run, and in-place calls (zero_, optimizer steps) write
        on every run. Placeholders and whatever fn makes are not readable, then
        or later: run the graph instead. The daemon checks every call at
        capture and names the first that fails.

            step = client.capture(lambda x: (x * w + b).relu(), ("f32", (64, 128)))
            y = step(x)
        """
        params = []
        for i, spec in enumerate(inputs):
            try:
                dt, shape = spec
                params.append((_dtypes.as_dtype(dt).name, [int(d) for d in shape]))
            except (TypeError, ValueError) as e:
                raise TypeError(f"Client.capture: input {i} is {spec!r}; expected (dtype, shape)") from e
        single = []

        def body(handles):
            out = fn(*[Tensor(h, self) for h in handles])
            single.append(None if out is None else isinstance(out, Tensor))
            outs = [] if out is None else [out] if isinstance(out, Tensor) else list(out)
            for k, t in enumerate(outs):
                if not isinstance(t, Tensor):
                    raise TypeError(f"Client.capture: output {k} is {type(t).__name__}; expected a tensord.Tensor")
            return [t._h for t in outs]

        return Graph(self._c.capture(params, body), self, single[0])

    # ------------------------------------------------------------ making tensors
    def tensor(self, data, dtype=None, requires_grad=False):
        """A new daemon tensor holding `data` (an array, nested lists or a
        number), uploaded at once (waits for the upload, not for the daemon's
        reply). The dtype is `dtype` if given (the data converted), else the
        array's (float64 becomes float32, other integers int64). bfloat16:
        from an ml_dtypes.bfloat16 array, a uint16 array of bits, or floats
        (rounded). C-contiguous arrays of the right dtype are sent without
        a copy."""
        want = None if dtype is None else _dtypes.as_dtype(dtype)
        array, have, convert = _host_array(data, want)
        out = self._upload(array, have)
        if convert is not None:
            out = out.to(convert)
            out._meta = (convert, tuple(array.shape))
        if requires_grad:
            out.requires_grad_(True)
        return out

    def from_numpy(self, array, requires_grad=False):
        """A new daemon tensor with the values, dtype and shape of NumPy array
        `array`, whose dtype must be one tensord has (float32, float16,
        ml_dtypes.bfloat16, int32, int64, uint8, bool). Sent without a copy
        when the array is C-contiguous."""
        if not isinstance(array, np.ndarray):
            raise TypeError(f"from_numpy(): expected a numpy.ndarray; got {type(array).__name__}")
        have = _dtypes.from_numpy(array.dtype)
        if have is None:
            raise TypeError(f"from_numpy(): NumPy dtype {array.dtype} has no tensord counterpart (tensord has "
                            f"{', '.join(d.long_name for d in _dtypes.ALL)}; tensor(x, dtype=...) converts)")
        if array.dtype.byteorder not in ("=", "|"):
            array = array.astype(array.dtype.newbyteorder("="))
        out = self._upload(array, have)
        if requires_grad:
            out.requires_grad_(True)
        return out

    def _upload(self, array, dtype):
        if not array.flags.c_contiguous:
            array = array.copy(order="C")  # (np.ascontiguousarray would make a 0-d array 1-d)
        # The module reads the buffer as bytes: hand it a flat byte view.
        raw = array.reshape(-1).view(np.uint8) if array.size else np.zeros(0, np.uint8)
        with transfer_bar("upload") as bar:
            handle = self._c.upload(dtype.name, list(array.shape), raw, bar)
        out = Tensor(handle, self)
        out._meta = (dtype, tuple(array.shape))
        return out

    # ------------------------------------------------------------ calls
    def _call(self, op, inputs, attrs, count=-1):
        handles = self._c.call(op, [t._h for t in inputs], attrs, count)
        return [Tensor(h, self) for h in handles]

    def call(self, op, *inputs, **attrs):
        """Calls op `op` by name on tensor `inputs` with attributes `attrs`,
        as the daemon defines them (no argument mapping; see tensorctl ops).
        Returns the outputs the op table lists: None, a Tensor or a tuple.
        For ops the daemon added after this client connected."""
        for i, t in enumerate(inputs):
            if not isinstance(t, Tensor):
                raise TypeError(f"call({op!r}): input {i} is {type(t).__name__}; expected a tensord.Tensor")
        normalized = [(k, v.name if isinstance(v, _dtypes.dtype) else v) for k, v in attrs.items()]
        outputs = self._call(op, list(inputs), normalized)
        if not outputs:
            return None
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def op_info(self, name=None):
        """The daemon's description of op `name` (inputs, attrs, dtypes, doc),
        or of every op when name is None, as of this client's connect."""
        if name is None:
            return list(self._opset.infos.values())
        try:
            return self._opset.infos[name]
        except KeyError:
            raise KeyError(f"the daemon has no op {name!r}") from None

    def refresh_ops(self):
        """Reads the daemon's op table again (for ops added since connect)."""
        self._opset = OpSet(self._c.ops())
        ops._install(self._opset)

    # ------------------------------------------------------------ named tensors
    def save(self, tensor, name, overwrite=False):
        """Names `tensor` on the daemon (as tensor.save(name)); waits."""
        if not isinstance(tensor, Tensor):
            raise TypeError(f"save(): expected a tensord.Tensor; got {type(tensor).__name__}")
        tensor.save(name, overwrite)

    def restore(self, name):
        """The named tensor `name` (pipelined: a missing name raises
        tensord.Refused at the first wait)."""
        return Tensor(self._c.restore(name), self)

    def ls(self, prefix=""):
        """The named tensors the caller may read (names starting with
        `prefix`), then this client's live unnamed ones: TensorInfo
        (id, name, owner, dtype, shape, bytes)."""
        return self._c.list(prefix)

    def rm(self, *names):
        """Deletes named tensors."""
        for name in names:
            self._c.remove(name)

    # ------------------------------------------------------------ files on the daemon's disk
    def load_file(self, path, prefix="", overwrite=False):
        """Has the daemon read safetensors file `path` from its own disk into
        named tensors: tensor T of the file becomes `prefix` + T. `path` must
        lie in a directory the daemon's config lists under files.dirs (a
        relative path: in the first). All or nothing: a bad file or a
        missing right loads nothing; an existing name is replaced only with
        `overwrite`. Needs the &files:load right. Returns a FileTransfer
        (path as resolved, tensors as TensorInfo, bytes); restore() opens the
        tensors:

            r = c.load_file("model.safetensors", prefix="m/")
            weights = {t.name: c.restore(t.name) for t in r.tensors}

        Large files show a tqdm bar (bytes on the device); Ctrl-C stops
        waiting (KeyboardInterrupt) while the daemon finishes or drops the
        load on its own."""
        with transfer_bar("load") as bar:
            return self._c.load_file(str(path), prefix, overwrite, bar)

    def save_file(self, path, names=None, prefix="", overwrite=False):
        """Has the daemon write named tensors to safetensors file `path` on
        its own disk (files.dirs as for load_file): the tensors `prefix` +
        NAME for each NAME of `names` (a name or a list), or with no names
        every tensor the caller may read whose name starts with `prefix`; in
        the file each is named without the prefix, so save_file and
        load_file with one prefix are inverses. The file appears whole or
        not at all; an existing one is replaced only with `overwrite`. Needs
        the &files:save right. Returns a FileTransfer (bytes: the file's
        size)."""
        if names is None:
            names = []
        elif isinstance(names, str):
            names = [names]
        else:
            names = list(names)
            for name in names:
                if not isinstance(name, str):
                    raise TypeError(f"save_file(): names must be tensor names (str); got {type(name).__name__} "
                                    "(save a Tensor under a name first: x.save(name))")
        with transfer_bar("save") as bar:
            return self._c.save_file(str(path), names, prefix, overwrite, bar)

    # ------------------------------------------------------------ groups and collectives
    def group_create(self, name, members, rank=None, timeout_ms=None):
        """Has this client's daemon join group `name` as member `rank` of
        `members` (HOST:PORT of each member's listener as the others reach
        it, by rank; tls://HOST:PORT for TLS node links). rank None: the
        position of this client's address in `members`. Every member must
        be asked the same way at about the same time (one process per
        member, or tensord.distributed.form_group() for all at once from one
        thread): blocks until all members are linked, or raises after
        `timeout_ms` (None: the daemon's groups.timeout_ms) naming those
        that did not answer. A group of the same name is replaced. Needs
        the &group:create right. Returns the GroupInfo."""
        members = [members] if isinstance(members, str) else list(members)
        for i, m in enumerate(members):
            if not isinstance(m, str):
                raise TypeError(f"group_create({name!r}): member {i} is {type(m).__name__}; expected 'HOST:PORT'")
        if rank is None:
            at = [i for i, m in enumerate(members) if m == self.address]
            if len(at) != 1:
                raise ValueError(f"group_create({name!r}): rank not given, and this client's address "
                                 f"{self.address!r} is {'not' if not at else 'more than once'} among members "
                                 f"{members}; pass rank=")
            rank = at[0]
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < len(members):
            raise ValueError(f"group_create({name!r}): rank must be an int in [0, {len(members)}); got {rank!r}")
        return self._c.group_create(name, members, rank, _dist._timeout(timeout_ms, "group_create"))

    def group_list(self):
        """The groups this client's daemon belongs to, sorted by name:
        GroupInfo (name, rank, size, members, state, origin, collectives)."""
        return self._c.group_list()

    def group_delete(self, name):
        """Has this client's daemon leave group `name`; collectives in flight
        on it fail on every member. Needs the &group:create right."""
        self._c.group_delete(name)

    def allreduce(self, tensors, group, op="sum", *, in_place=False, timeout_ms=None):
        """Reduces `tensors` (a Tensor, a named tensor's name, or a list of
        them: one bucket) element-wise over `group` (its name or a
        ProcessGroup): op 'sum', 'mean', 'max' or 'min'. Every member must
        issue it with tensors of the same dtypes and shapes. Returns a
        Tensor per input (a Tensor for a single one): new tensors, or with
        in_place the inputs themselves, overwritten once the whole
        collective succeeded (on failure they keep their values).
        Pipelined like any call: returns at once, the results feed further
        calls, and an error (an unknown or broken group, shapes that differ
        between members, a bad op, a member that died or stalled past
        timeout_ms) is raised by the first wait on a result, with the
        daemon's message."""
        return _dist._allreduce(self, tensors, group, op, in_place=in_place, timeout_ms=timeout_ms)

    def broadcast(self, tensors, group, root=0, *, in_place=False, timeout_ms=None):
        """Every member gets member `root`'s values of `tensors` (as for
        allreduce: a Tensor, a name or a list; same dtypes and shapes on
        every member). Returns a Tensor per input, new or (in_place) the
        inputs; pipelined."""
        return _dist._broadcast(self, tensors, group, root, in_place=in_place, timeout_ms=timeout_ms)

    def allgather(self, tensor, group, *, timeout_ms=None):
        """The members' `tensor`s stacked along a new leading dim of the
        group's size, in rank order (a new Tensor; pipelined)."""
        return _dist._allgather(self, tensor, group, timeout_ms=timeout_ms)

    def reduce_scatter(self, tensor, group, op="sum", *, timeout_ms=None):
        """This member's slice of the reduction (op as for allreduce) of the
        members' `tensor`s, whose leading dim must be divisible by the
        group's size: rows [rank * n / size, (rank + 1) * n / size). A new
        Tensor; pipelined."""
        return _dist._reduce_scatter(self, tensor, group, op, timeout_ms=timeout_ms)

    def barrier(self, group, *, timeout_ms=None, async_op=False):
        """Waits until every member of `group` reached the barrier; raises
        the daemon's error otherwise. async_op=True returns at once with a
        CollectiveWork whose wait() does the waiting (to reach a barrier on
        several daemons from one thread)."""
        return _dist._barrier(self, group, timeout_ms=timeout_ms, async_op=async_op)

    # ------------------------------------------------------------ the daemon
    def info(self):
        """The daemon's version, device, memory and counters."""
        return self._c.info()

    def whoami(self):
        """The principal this client authenticated as."""
        return self._c.whoami()

    def status(self):
        """The principal, its roles and quota use (protocol 4)."""
        return self._c.status()

    def admin_reload(self):
        """Has the daemon re-read its tokens and policy (needs &admin:reload)."""
        self._c.admin_reload()

    def stats(self):
        """What this client did: calls (requests sent) and round_trips (requests waited for)."""
        return self._c.stats()

    def daemon_stats(self):
        """The daemon's load since it started (tensorctl stat): version,
        uptime_seconds, device, memory, connections, sessions, inflight_calls,
        queued_jobs, bytes_in/bytes_out, ops_executed, per principal
        (principals: PrincipalStats) and per op (ops: OpStats with counts and
        latency percentiles in seconds; .op(name) finds one). as_dict() gives
        plain dicts and lists. Shows every principal, so it needs the
        &admin:usage right (tensord.Refused otherwise)."""
        return self._c.daemon_stats()


def connect(address=None, token=None, *, ca=None, cert=None, key=None):
    """Connects to a tensord daemon and returns the Client; it becomes this
    thread's default client (for tensord.ops functions without tensor
    inputs, and tensord.nn modules) and fills tensord.ops from the daemon's
    op table. Arguments and defaults as tensorctl's: see Client.

        c = tensord.connect()                        # TENSORD_ADDR or 127.0.0.1:7450
        c = tensord.connect("tls://gpu:7450", ca="ca.pem")
    """
    return Client(address, token, ca=ca, cert=cert, key=key)
