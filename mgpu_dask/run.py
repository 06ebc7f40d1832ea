"""``python -m mgpu_dask.run``: the command line, :mod:`mgpu_dask.cli`."""

from __future__ import annotations

from .cli import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
