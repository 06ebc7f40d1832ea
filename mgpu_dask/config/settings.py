"""Packaged defaults (``mgpu_dask.yaml``) merged into ``dask.config``.

Every key can be overridden the Dask way (``dask.config.set``, a YAML file in
``~/.config/dask/``, or ``DASK_MGPU_DASK__DATA__CACHE_DIR=...``) and, for the
two paths people set most, through ``MGPU_DASK_DATA_DIR`` and
``MGPU_DASK_CACHE_DIR``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dask
import dask.config
import yaml

for _name in ("mgpu_dask.yaml", "jobqueue.yaml"):
    with Path(__file__).with_name(_name).open() as f:
        dask.config.update_defaults(yaml.safe_load(f))


def get(key: str, default: Any = None) -> Any:
    """Value of ``mgpu-dask.<key>`` from dask.config."""
    return dask.config.get(f"mgpu-dask.{key}", default=default)


def seconds(key: str) -> float:
    """A duration key (``"30s"``, ``"2 minutes"``, or a number) in seconds."""
    from dask.utils import parse_timedelta

    return float(parse_timedelta(get(key), default="s"))


def data_dir() -> Path | None:
    value = os.environ.get("MGPU_DASK_DATA_DIR") or get("data.data-dir")
    return Path(value).expanduser() if value else None


def cache_dir() -> Path:
    value = os.environ.get("MGPU_DASK_CACHE_DIR") or get("data.cache-dir")
    if value:
        return Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "mgpu_dask"
