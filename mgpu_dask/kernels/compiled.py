"""How many of our Numba kernels this process compiled, rather than loaded from the cache.

Every kernel of ours is ``cache=True``: the first process to use it on a
machine compiles it (seconds for a CUDA kernel) and writes it to Numba's
cache; later processes load it.  Numba counts both per dispatcher;
:func:`compilations` adds up the compiles over our kernel modules, so a job
can tell whether its warm-up compiled anything.
"""

from __future__ import annotations

import os
import sys
import time


def _dispatchers() -> list:
    """Our modules' dispatchers, each once (a kernel imported elsewhere is the same one)."""
    found = {}
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(__package__ + "."):
            continue
        found.update({id(obj): obj for obj in vars(module).values()
                      if hasattr(obj, "_cache_misses")})
    return list(found.values())


def compilations() -> int:
    """Kernels (one per signature) compiled in this process so far, over our modules."""
    return sum(sum(d._cache_misses.values()) for d in _dispatchers())


def compiled() -> list[str]:
    """Each kernel and signature this process compiled rather than loaded from the cache,
    as ``module.kernel(types)``, sorted."""
    out = []
    for d in _dispatchers():
        func = getattr(d, "py_func", None)
        name = f"{getattr(func, '__module__', '?').rsplit('.', 1)[-1]}." \
               f"{getattr(func, '__qualname__', '?')}"
        out += [f"{name}{tuple(str(t) for t in sig)}" for sig, n in d._cache_misses.items() if n]
    return sorted(out)


def cache_dir() -> str | None:
    """Where Numba keeps compiled kernels for this process (``NUMBA_CACHE_DIR``; None: beside
    the sources, or in its user-wide folder where those are read-only)."""
    return os.environ.get("NUMBA_CACHE_DIR") or None


def index_path(cache: object) -> str:
    """The index file of a dispatcher's on-disk cache (``""`` where it has none)."""
    file = getattr(cache, "_cache_file", None)
    return str(getattr(file, "_index_path", "") or getattr(cache, "_index_path", "") or "")


class Steps:
    """Seconds per step of a warm-up, each named when it is done (``done(name)``), and
    how many of our kernels it compiled (``seconds`` maps a name to both)."""

    def __init__(self) -> None:
        self._last = time.perf_counter()
        self._compiled = compilations()
        self.seconds: dict[str, dict[str, float]] = {}

    def done(self, name: str) -> None:
        now, compiled = time.perf_counter(), compilations()
        self.seconds[name] = {"seconds": now - self._last, "compiled": compiled - self._compiled}
        self._last, self._compiled = now, compiled
