"""Data sets (IDX files, registry and checksums, download, deformed copies), the split
protocol, sharding onto Dask workers, and result files written atomically.

Sharding's names (:mod:`.sharding`: Dask's arrays and distributed) load on
first use, so that checking a command's options (:mod:`.registry`,
:func:`.deformed.deformed_spec`) imports neither.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..parallel.workers import detect_device, worker_addresses
from .datasets import Dataset, DatasetUnavailable, load_dataset
from .idx import read_idx, write_idx
from .registry import DATASETS
from .split import Split, split

if TYPE_CHECKING:
    from .sharding import ShardInfo, shard, shard_locations

_SHARDING = ("ShardInfo", "shard", "shard_locations")

__all__ = [
    "DATASETS", "Dataset", "DatasetUnavailable", "ShardInfo", "Split", "detect_device",
    "load_dataset", "read_idx", "shard", "shard_locations", "split", "worker_addresses",
    "write_idx",
]


def __getattr__(name: str) -> Any:
    if name in _SHARDING:
        return getattr(importlib.import_module(".sharding", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
