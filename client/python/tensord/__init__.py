"""tensord: tensors on a remote GPU, from Python.

    import tensord
    c = tensord.connect()                          # as tensorctl: TENSORD_ADDR, TENSORD_TOKEN, ...
    x = c.tensor([[1., 2.]])
    y = (x @ c.tensor([[3.], [4.]])).relu()        # pipelined: no round trip yet
    print(y.numpy())                               # one round trip: [[11.]]

Every op of the daemon is a function in tensord.ops (and tensord.NAME) and a
Tensor method, generated from the daemon's op table at connect(). Autograd:
requires_grad=True, loss.backward(), x.grad, tensord.no_grad(); training:
tensord.nn (Module, Linear, Conv2d, LayerNorm, Embedding) and tensord.optim
(SGD, Adam, AdamW). Errors: tensord.Error and its subclasses Refused,
Overloaded, Disconnected, Unimplemented, ThreadError. Named tensors:
c.save/restore/ls/rm; safetensors files on the daemon's disk:
c.load_file/save_file; the daemon's load: c.daemon_stats(). Groups of
daemons and collectives: c.group_create/group_list/group_delete,
c.allreduce/broadcast/allgather/reduce_scatter/barrier, and
tensord.distributed (form_group, ProcessGroup, DistributedDataParallel).

A Client and its tensors belong to the thread that created the Client.
"""

from . import _core
from ._client import Client, Graph, connect
from ._dtypes import bfloat16, dtype, float16, float32, int32, int64, uint8
from ._ops import ops
from ._progress import set_progress_bars
from ._tensor import Tensor

Error = _core.Error
Refused = _core.Refused
Overloaded = _core.Overloaded
Disconnected = _core.Disconnected
Unimplemented = _core.Unimplemented
ThreadError = _core.ThreadError


class no_grad:
    """Context manager (and decorator): calls inside are not recorded for
    autograd, as torch.no_grad(). Per thread."""

    def __init__(self, func=None):
        self._scopes = []
        if func is not None:  # used as @tensord.no_grad without parentheses
            self.__wrapped__ = func

    def __enter__(self):
        scope = _core.NoGradScope()
        scope.enter()
        self._scopes.append(scope)
        return self

    def __exit__(self, *exc):
        self._scopes.pop().exit()
        return False

    def __call__(self, *args, **kwargs):
        func = getattr(self, "__wrapped__", None)
        if func is None:  # @tensord.no_grad(): decorate args[0]
            return no_grad(args[0])
        with no_grad():
            return func(*args, **kwargs)


def is_grad_enabled():
    """False inside tensord.no_grad()."""
    return _core.grad_enabled()


def manual_seed(seed):
    """Seeds the generator tensord.nn initialises parameters with."""
    from . import nn

    nn._seed(seed)


def __getattr__(name):
    # tensord.relu(x), tensord.zeros(2, 3), tensord.cat([a, b]): the daemon's ops.
    if name.startswith("__"):
        raise AttributeError(name)
    try:
        return getattr(ops, name)
    except AttributeError as error:
        raise AttributeError(f"module 'tensord' has no attribute {name!r} ({error})") from None


# dtype names as PyTorch spells them; assigned last, since `bool`, `float`
# and `int` shadow the builtins in this module from here on.
half = float16
long = int64
from ._dtypes import bool_ as bool  # noqa: E402,A001
float = float32  # noqa: A001
int = int32  # noqa: A001

from . import distributed, nn, optim  # noqa: E402  (they use the names above)

__all__ = ["Client", "Graph", "connect", "Tensor", "dtype", "ops", "nn", "optim", "distributed", "no_grad", "is_grad_enabled",
           "manual_seed", "set_progress_bars", "Error", "Refused", "Overloaded", "Disconnected", "Unimplemented",
           "ThreadError", "float32", "float16", "bfloat16", "int32", "int64", "uint8", "bool", "half", "long",
           "float", "int"]
