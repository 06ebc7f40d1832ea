"""The command line, ``python -m mgpu_dask.run`` (and ``mgpu-dask``): the parser
(:mod:`.parser`), the commands (:mod:`.commands`, :mod:`.tasks`) and what they print
(:mod:`.printing`).  Parsing, calling and printing only: the work is in
:mod:`mgpu_dask.jobs`."""

from __future__ import annotations

from .main import cli, main

__all__ = ["cli", "main"]
