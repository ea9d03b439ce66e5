"""Progress bars for large transfers, through tqdm when it is installed."""

try:
    from tqdm import tqdm as _tqdm
except ImportError:
    _tqdm = None

_min_bytes = 64 << 20  # smaller transfers show no bar
_enabled = True


def set_progress_bars(enabled=True, min_bytes=64 << 20):
    """Turns tqdm progress bars for uploads and downloads on or off, and sets
    the smallest transfer that shows one (64 MiB by default). Bars need the
    tqdm package and, as tqdm decides, a terminal on stderr."""
    global _enabled, _min_bytes
    _enabled = bool(enabled)
    _min_bytes = int(min_bytes)


class _Bar:
    """A progress callback (bytes done, bytes total) that opens a tqdm bar
    once it learns the transfer is large."""

    def __init__(self, desc):
        self._desc = desc
        self._bar = None
        self._done = 0

    def __call__(self, done, total):
        if self._bar is None:
            if total < _min_bytes:
                return
            # disable=None: no bar unless stderr is a terminal.
            self._bar = _tqdm(total=total, desc=self._desc, unit="B", unit_scale=True, unit_divisor=1024,
                              leave=False, disable=None)
        self._bar.update(done - self._done)
        self._done = done

    def close(self):
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class transfer_bar:
    """Context manager giving the progress callback for one transfer (None
    when bars are off or tqdm is missing) and closing its bar at the end."""

    def __init__(self, desc):
        self._bar = _Bar(desc) if _enabled and _tqdm is not None else None

    def __enter__(self):
        return self._bar

    def __exit__(self, *exc):
        if self._bar is not None:
            self._bar.close()
        return False
