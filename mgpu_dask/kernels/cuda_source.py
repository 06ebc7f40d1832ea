"""The CUDA C sources of our tensor-core kernels as NVRTC compiles them.

Each ``.cu`` file of a kernel package is compiled with :file:`mma.cuh` (the
shared cp.async, ldmatrix and ``mma.sync`` helpers) put in front of it, as one
source: CuPy keys its cache by the source text, so an edit of either compiles
anew, and ``jobs/ahead.json`` lists the text as compiled.
"""

from __future__ import annotations

from importlib import resources


def source(package: str, name: str) -> str:
    """The helpers, then the file ``name`` of ``package``, as one source."""
    helpers = resources.files(__package__).joinpath("mma.cuh").read_text()
    return helpers + "\n" + resources.files(package).joinpath(name).read_text()
