"""How many kernels this process compiled, rather than loaded from a cache: our Numba
kernels, and CuPy's where :func:`track_cupy` was called.

Every kernel of ours is ``cache=True``: the first process to use it on a
machine compiles it (seconds for a CUDA kernel) and writes it to Numba's
cache; later processes load it.  Numba counts both per dispatcher.  CuPy
compiles its own kernels (elementwise operations, reductions) with NVRTC the
first time a process needs one that its cache folder lacks, and keeps no count:
:func:`track_cupy` wraps CuPy's compile path to record each kernel it compiles
and the time spent getting kernels (compiled or loaded).  :func:`compilations`
adds both up, so a job can tell whether its warm-up compiled anything, and
:func:`compiled` names each kernel, so it can tell what compiled after it.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import time
from typing import Any, Callable


def _dispatchers() -> list:
    """Our modules' dispatchers, each once (a kernel imported elsewhere is the same one)."""
    found = {}
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(__package__ + "."):
            continue
        found.update({id(obj): obj for obj in vars(module).values()
                      if hasattr(obj, "_cache_misses")})
    return list(found.values())


class _CupyLog:
    """What CuPy's compile path did in this process since :func:`track_cupy`."""

    tracked = False             # track_cupy found CuPy's internals and wrapped them
    compiled: list[str] = []    # the kernels NVRTC compiled, by name
    seconds = {"request": 0.0, "compile": 0.0, "check": 0.0}
    calls = {"request": 0, "compile": 0, "check": 0}


_BOUNDS = r"(?:__launch_bounds__\([^)]*\)\s+)?"
_KERNEL_NAME = re.compile(rf"__global__\s+{_BOUNDS}void\s+{_BOUNDS}(\w+)")


def _kernel_names(source: Any) -> str:
    names = _KERNEL_NAME.findall(source) if isinstance(source, str) else []
    return "+".join(dict.fromkeys(names)) or "(unnamed)"


def _timed(inner: Callable[..., Any], kind: str) -> Callable[..., Any]:
    @functools.wraps(inner)
    def call(source: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return inner(source, *args, **kwargs)
        finally:
            _CupyLog.seconds[kind] += time.perf_counter() - started
            _CupyLog.calls[kind] += 1
            if kind == "compile":
                _CupyLog.compiled.append(_kernel_names(source))

    call._mgpu_dask_timed = True  # type: ignore[attr-defined]
    return call


# CuPy's internals that track_cupy wraps: one call per kernel a process needs first
# (found in CuPy's cache folder, or compiled); NVRTC compiling one; NVRTC on an empty
# source, which CuPy runs once per set of options in every process (its version check).
_WRAPPED = {"_compile_with_cache_cuda": "request", "_compile_using_nvrtc_no_warning": "compile",
            "_preprocess": "check"}


def track_cupy() -> bool:
    """From now on, record CuPy's kernel compiles in this process (see the module's
    docstring); calling it again changes nothing.  False (nothing recorded) where CuPy or
    the functions of its compiler module that this wraps (its internals) are not there."""
    try:
        from cupy.cuda import compiler
    except ImportError:
        return False
    if not all(callable(getattr(compiler, name, None)) for name in _WRAPPED):
        return False
    for name, kind in _WRAPPED.items():
        inner = getattr(compiler, name)
        if not getattr(inner, "_mgpu_dask_timed", False):
            setattr(compiler, name, _timed(inner, kind))
    _CupyLog.tracked = True
    return True


def cupy_kernels() -> dict[str, Any]:
    """CuPy's kernel path in this process since :func:`track_cupy`: the kernels it was
    asked for and the seconds they took (loaded from its cache folder or compiled), the
    compiles alone, and NVRTC's version checks (run in every process, cache or not);
    ``tracked`` False: none of it was recorded (no CuPy, or CuPy's internals changed)."""
    return {"tracked": _CupyLog.tracked, "requests": _CupyLog.calls["request"],
            "seconds": _CupyLog.seconds["request"],
            "compiled": _CupyLog.calls["compile"], "compile seconds": _CupyLog.seconds["compile"],
            "version checks": _CupyLog.calls["check"],
            "version check seconds": _CupyLog.seconds["check"]}


def compilations() -> int:
    """Kernels (one per signature) compiled in this process so far, over our modules, and
    CuPy's compiles since :func:`track_cupy`."""
    return sum(sum(d._cache_misses.values()) for d in _dispatchers()) + len(_CupyLog.compiled)


def compiled() -> list[str]:
    """Each kernel and signature this process compiled rather than loaded from the cache,
    as ``module.kernel(types)``, and CuPy's as ``cupy:name`` (``xN`` when N times), sorted."""
    out = []
    for d in _dispatchers():
        func = getattr(d, "py_func", None)
        name = f"{getattr(func, '__module__', '?').rsplit('.', 1)[-1]}." \
               f"{getattr(func, '__qualname__', '?')}"
        out += [f"{name}{tuple(str(t) for t in sig)}" for sig, n in d._cache_misses.items() if n]
    counts: dict[str, int] = {}
    for name in _CupyLog.compiled:
        counts[name] = counts.get(name, 0) + 1
    out += [f"cupy:{name}" + (f" x{n}" if n > 1 else "") for name, n in counts.items()]
    return sorted(out)


def cache_dir() -> str | None:
    """Where Numba keeps compiled kernels for this process (``NUMBA_CACHE_DIR``; None: beside
    the sources, or in its user-wide folder where those are read-only)."""
    return os.environ.get("NUMBA_CACHE_DIR") or None


def in_cache(kernels: Any) -> bool:
    """Whether Numba's on-disk cache holds each of these dispatchers (an index file for
    each: compiled by this process or an earlier one)."""
    return all(os.path.exists(index_path(getattr(k, "_cache", None))) for k in kernels)


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
