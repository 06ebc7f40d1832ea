"""Compiling kernels in several processes at once, ahead of the process that runs them.

A first run on a machine compiles every Numba kernel it uses and every CuPy
kernel (NVRTC), one after another on the worker that needs them.  Each is independent of the others, and
both libraries keep what they compiled in a cache on disk (``NUMBA_CACHE_DIR``,
``CUPY_CACHE_DIR``).  :class:`Compiling` hands a list of them to a few short-lived
processes that compile them side by side into those caches, so that the process
that runs them later only loads them.

The list names each kernel as it was asked for (:class:`Recorder` writes it down
while a run compiles): a Numba kernel by module, name and argument types; a CuPy
kernel by the source and options CuPy gave NVRTC (its cache key, so a list made with
another CuPy version compiles nothing useful: callers keep the version beside it).
This module knows nothing of jobs or Dask; it runs on a machine with a GPU.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from typing import Any, Callable

from .compiled import compilations, index_path, track_cupy

_ARRAY = re.compile(r"array\((\w+), (\d)d, ([CFA])\)")


def encode(signature: tuple) -> list[str]:
    """Numba argument types as text, ``array(float32, 2d, C)``, ``int64``, ``bool``."""
    return [str(t) for t in signature]


def decode(names: list[str]) -> tuple:
    """The Numba types :func:`encode` wrote (arrays, and scalars by their type name)."""
    from numba.core import types

    out = []
    for name in names:
        array = _ARRAY.fullmatch(name)
        if array:
            dtype, ndim, layout = array.groups()
            out.append(types.Array(_scalar(types, dtype), int(ndim), layout))
        else:
            out.append(_scalar(types, name))
    return tuple(out)


def _scalar(types: Any, name: str) -> Any:
    kind = getattr(types, "boolean" if name == "bool" else name, None)
    if not isinstance(kind, types.Type):
        raise ValueError(f"not a Numba scalar type: {name!r}")
    return kind


class Recorder:
    """While entered, records each Numba CUDA kernel compiled or loaded for a signature
    and each kernel CuPy asks NVRTC for, as items :func:`compile_items` takes, with the
    seconds each took (``items``)."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self._undo: list[Callable[[], None]] = []

    def __enter__(self) -> "Recorder":
        from cupy.cuda import compiler
        from numba.core import sigutils
        from numba.cuda import dispatcher

        items, seen = self.items, set()
        compile_kernel = dispatcher.CUDADispatcher.compile

        def compile_recorded(kernel: Any, sig: Any) -> Any:
            started = time.perf_counter()
            out = compile_kernel(kernel, sig)
            func = kernel.py_func
            item = {"numba": f"{func.__module__}:{func.__qualname__}",
                    "signature": encode(sigutils.normalize_signature(sig)[0])}
            key = json.dumps(item, sort_keys=True)
            if key not in seen:
                seen.add(key)
                items.append({**item, "seconds": round(time.perf_counter() - started, 3)})
            return out

        cupy_compile = compiler._compile_with_cache_cuda

        def cupy_recorded(source: str, options: tuple, arch: Any = None, extra_source: Any = None,
                          backend: str = "nvrtc", enable_cooperative_groups: bool = False,
                          name_expressions: Any = None, log_stream: Any = None,
                          cache_in_memory: bool = False, jitify: bool = False,
                          to_ltoir: bool = False) -> Any:
            started = time.perf_counter()
            out = cupy_compile(source, options, arch, extra_source, backend,
                               enable_cooperative_groups, name_expressions, log_stream,
                               cache_in_memory, jitify, to_ltoir)
            item = {"cupy": {"source": source, "options": _portable(options),
                             "extra_source": HEADERS if extra_source == _headers()
                             else extra_source, "backend": backend,
                             "cooperative": enable_cooperative_groups,
                             "name_expressions": list(name_expressions or ()) or None,
                             "jitify": jitify, "to_ltoir": to_ltoir}}
            key = json.dumps(item, sort_keys=True)
            if not cache_in_memory and key not in seen:
                seen.add(key)
                items.append({**item, "seconds": round(time.perf_counter() - started, 3)})
            return out

        dispatcher.CUDADispatcher.compile = compile_recorded
        compiler._compile_with_cache_cuda = cupy_recorded
        self._undo = [lambda: setattr(dispatcher.CUDADispatcher, "compile", compile_kernel),
                      lambda: setattr(compiler, "_compile_with_cache_cuda", cupy_compile)]
        return self

    def __exit__(self, *exc: object) -> None:
        for undo in self._undo:
            undo()


HEADERS = "{cupy headers}"
"""Recorded in place of the text of CuPy's headers, which CuPy adds to each kernel's cache
key (``extra_source``): the same for every kernel, and the installed CuPy's at replay."""


def _headers() -> str | None:
    from cupy._core import core

    return core._get_header_source()


def _include_options() -> list[str]:
    """The include folders CuPy adds to every kernel's options on this installation."""
    from cupy._core import core

    return [o for o in core.assemble_cupy_compiler_options(()) if o.startswith("-I")]


def _portable(options: tuple) -> list[str]:
    """``options`` with this installation's include folders as ``{include N}``."""
    includes = _include_options()
    return [f"{{include {includes.index(o)}}}" if o in includes else o for o in options]


def _local(options: list[str]) -> tuple:
    """:func:`_portable`'s options with the include folders of this installation."""
    includes = _include_options()
    out = []
    for o in options:
        if o.startswith("{include "):
            n = int(o[len("{include "):-1])
            if n >= len(includes):
                raise ValueError("CuPy's include folders differ from the recording's")
            o = includes[n]
        out.append(o)
    return tuple(out)


_CUPY_NAME = re.compile(r"__global__\s+void\s+(\w+)")


def label(item: dict[str, Any]) -> str:
    """A short name of a listed kernel: ``module:function`` (Numba) or CuPy's kernel name."""
    if "numba" in item:
        return item["numba"].replace("mgpu_dask.kernels.", "")
    found = _CUPY_NAME.search(item["cupy"]["source"])
    return f"cupy:{found.group(1) if found else '?'}"


def _kernel(item: dict[str, Any]) -> Any:
    """The Numba dispatcher a ``numba`` item names (``module:name``)."""
    module, name = item["numba"].split(":")
    return getattr(importlib.import_module(module), name)


_ONE_ARCH = re.compile(r"^-arch=sm_(\d+)a$")


def for_another_gpu(options: list[str], capability: str) -> bool:
    """Whether CuPy kernel options name one architecture only (``-arch=sm_90a``: Hopper's
    wgmma) other than ``capability`` (CuPy's ``"90"``): a list recorded on one GPU
    compiles nothing useful for it on another."""
    named = [m.group(1) for m in map(_ONE_ARCH.match, options) if m]
    return bool(named) and named[0] != capability


def _compile_one(item: dict[str, Any]) -> None:
    """Compile one item, or load it from the cache (nothing for another GPU's kernel)."""
    if "numba" in item:
        _kernel(item).compile(decode(item["signature"]))
        return
    import cupy
    from cupy.cuda import compiler

    c = item["cupy"]
    if for_another_gpu(c["options"], cupy.cuda.Device().compute_capability):
        return
    compiler._compile_with_cache_cuda(
        c["source"], _local(c["options"]), None,
        _headers() if c["extra_source"] == HEADERS else c["extra_source"], c["backend"],
        c["cooperative"], tuple(c["name_expressions"]) if c["name_expressions"] else None,
        None, False, c["jitify"], c["to_ltoir"])


def compile_items(items: list[dict[str, Any]], report: Callable[[dict], None]) -> None:
    """Compile each item (or load it from the caches) in this process, calling ``report``
    with ``{"item": i, "compiled": bool, "seconds": s}`` (or ``"error"``) after each
    (compiled or loaded as :mod:`.compiled` counts them)."""
    if any("cupy" in item for item in items):
        track_cupy()
    for i, item in enumerate(items):
        started, before = time.perf_counter(), compilations()
        try:
            _compile_one(item)
        except Exception as exc:  # one kernel that will not build leaves the rest
            report({"item": i, "error": f"{type(exc).__name__}: {exc}"[:300]})
            continue
        report({"item": i, "compiled": compilations() > before,
                "seconds": time.perf_counter() - started})


CUPY_PROCESSES = 2
"""Processes that compile CuPy's kernels at most: they are many and mostly short, and the
other processes are left to the long Numba kernels."""


def balance(items: list[dict[str, Any]], processes: int) -> list[list[int]]:
    """Item indices in at most ``processes`` groups of about equal recorded seconds
    (longest first, each to the least loaded group), CuPy's kernels in at most
    :data:`CUPY_PROCESSES` of them.  A Numba kernel's signatures stay in one group: they
    share one index file in the cache, which two processes would race to rewrite."""
    units: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        units.setdefault(item.get("numba") or f"cupy {i}", []).append(i)

    def cost(unit: list[int]) -> float:
        return sum(float(items[i].get("seconds") or 0.1) for i in unit)

    processes = max(1, processes)
    has_cupy = any(key.startswith("cupy ") for key in units)
    has_numba = any(not key.startswith("cupy ") for key in units)
    share = sum(cost(u) for k, u in units.items() if k.startswith("cupy ")) / max(
        1e-9, sum(cost(u) for u in units.values()))
    n_cupy = 0 if not has_cupy else processes if not has_numba or processes == 1 else \
        max(1, min(CUPY_PROCESSES, processes - 1, round(processes * share)))
    groups: list[list[int]] = [[] for _ in range(processes)]
    loads = [0.0] * processes
    for unit_key, unit in sorted(units.items(), key=lambda u: cost(u[1]), reverse=True):
        cupy = unit_key.startswith("cupy ")
        allowed = range(n_cupy) if cupy else range(n_cupy if has_cupy and processes > n_cupy
                                                   else 0, processes)
        g = min(allowed, key=lambda g: loads[g])
        groups[g] += unit
        loads[g] += cost(unit)
    return [g for g in groups if g]


class Compiling:
    """``items`` being compiled in up to ``processes`` child processes from the moment this
    is made (they inherit the environment: its cache folders).

    ``on_first_compile`` is called once, on a reader thread, when a child says it is
    compiling something rather than loading it.  :meth:`wait` returns what they did.
    """

    def __init__(self, items: list[dict[str, Any]], processes: int,
                 on_first_compile: Callable[[], None] | None = None) -> None:
        self.items = items
        self.began = (time.perf_counter(), time.time())
        self.ended: tuple[float, float] | None = None
        self.done: list[dict[str, Any]] = []
        self._ready: dict[tuple[int, ...], float] = {}  # a child's items -> when it had imported
        self._lock = threading.Lock()
        self._first = on_first_compile
        self._children: list[subprocess.Popen] = []
        self._readers: list[threading.Thread] = []
        atexit.register(self._stop)  # a run that ends first (refused) leaves none behind
        self._groups = balance(items, processes)
        for group in self._groups:
            child = subprocess.Popen(
                [sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            child.stdin.write(json.dumps([items[i] for i in group]))
            child.stdin.close()
            reader = threading.Thread(target=self._read, args=(child, group), daemon=True,
                                      name="mgpu-dask-compile-ahead")
            reader.start()
            self._children.append(child)
            self._readers.append(reader)

    def _read(self, child: subprocess.Popen, group: list[int]) -> None:
        for line in child.stdout:
            with contextlib.suppress(ValueError, KeyError, IndexError):
                got = json.loads(line)
                if (got.get("compiling") or got.get("compiled")) and self._first is not None:
                    with self._lock:
                        first, self._first = self._first, None
                    if first is not None:
                        first()
                    continue
                if "ready" in got:
                    with self._lock:
                        self._ready[tuple(group)] = got["ready"]
                    continue
                if "item" in got:
                    got["item"] = group[got["item"]]
                    with self._lock:
                        self.done.append(got)

    def finished(self) -> bool:
        """Whether every child has ended (without waiting)."""
        return all(child.poll() is not None for child in self._children)

    def _stop(self) -> None:
        for child in self._children:
            if child.poll() is None:
                child.kill()

    def wait(self, timeout: float) -> dict[str, Any]:
        """Wait for every child (killing any still at work after ``timeout`` seconds);
        returns how many kernels were compiled, loaded and failed, and the seconds."""
        deadline = time.perf_counter() + timeout
        for child, reader in zip(self._children, self._readers):
            try:
                child.wait(max(0.0, deadline - time.perf_counter()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            reader.join(5)
        if self.ended is None:
            self.ended = (time.perf_counter(), time.time())
        compiled = [d for d in self.done if d.get("compiled")]
        return {"processes": len(self._children), "kernels": len(self.items),
                "compiled": len(compiled),
                "loaded": sum(1 for d in self.done if d.get("compiled") is False),
                "failed": [d["error"] for d in self.done if "error" in d],
                "not reached": len(self.items) - len(self.done),
                "seconds": self.ended[0] - self.began[0],
                "by process": [self._process_report(g) for g in self._groups]}

    def _process_report(self, group: list[int]) -> dict[str, Any]:
        """One child: seconds from the start to its imports done, and each of its kernels'
        seconds (compiled or loaded), in the order it built them."""
        ready = self._ready.get(tuple(group))
        done = {d["item"]: d for d in self.done if "item" in d}
        return {"imports done after": None if ready is None else round(ready - self.began[1], 3),
                "kernels": [[label(self.items[i]), round(done[i]["seconds"], 3)
                             if "seconds" in done.get(i, {}) else None] for i in group]}


def _open_context() -> None:
    """Retain the first visible device's primary context through the driver itself (the
    context Numba and CuPy take later); nothing where the driver will not load."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        driver = ctypes.CDLL("libcuda.so.1")
        device, context = ctypes.c_int(), ctypes.c_void_p()
        if driver.cuInit(0) == 0 and driver.cuDeviceGet(ctypes.byref(device), 0) == 0:
            driver.cuDevicePrimaryCtxRetain(ctypes.byref(context), device)


def _child() -> int:
    """A child of :class:`Compiling`: items as JSON on stdin, one JSON line per item out
    (and ``{"compiling": true}`` before the first that is not in the caches)."""
    items = json.load(sys.stdin)

    def say(got: dict) -> None:
        print(json.dumps(got), flush=True)

    # The device's context (the one Numba and CuPy both use) is made while Numba
    # imports: the driver's calls leave the interpreter free.
    opening = threading.Thread(target=_open_context, daemon=True)
    opening.start()
    import numba.cuda  # noqa: F401

    if any("cupy" in item for item in items):
        import cupy  # noqa: F401
    opening.join()
    say({"ready": time.time()})  # imports done
    for item in items:  # a Numba kernel not in the cache: said before it compiles
        if "numba" in item:
            if not os.path.exists(index_path(getattr(_kernel(item), "_cache", None))):
                say({"compiling": True})
                break
    compile_items(items, say)
    return 0


if __name__ == "__main__":
    sys.exit(_child())
