"""The CUDA C sources of our tensor-core kernels as NVRTC compiles them.

Each ``.cu`` file of a kernel package is compiled with :file:`mma.cuh` (the
shared cp.async, ldmatrix and ``mma.sync`` helpers) put in front of it, as one
source: CuPy keys its cache by the source text, so an edit of either compiles
anew, and ``jobs/ahead.json`` lists the text as compiled.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

_MODULES: dict[tuple, Any] = {}


def source(package: str, name: str) -> str:
    """The helpers, then the file ``name`` of ``package``, as one source."""
    helpers = resources.files(__package__).joinpath("mma.cuh").read_text()
    return helpers + "\n" + resources.files(package).joinpath(name).read_text()


def module(package: str, name: str, options: tuple[str, ...]) -> Any:
    """The ``cupy.RawModule`` of :func:`source` ``(package, name)`` built with NVRTC
    ``options`` for the current GPU, made on first use and kept for the process: every
    launch of a kernel asks for its module, and a module is a compile (or a load from
    CuPy's cache on disk) away."""
    import cupy

    key = (package, name, cupy.cuda.Device().id, tuple(options))
    found = _MODULES.get(key)
    if found is None:
        found = _MODULES[key] = cupy.RawModule(code=source(package, name), options=key[3])
    return found


def forget() -> None:
    """Drop the modules :func:`module` kept (tests that rebuild a kernel with other
    options under the same key's switches)."""
    _MODULES.clear()
