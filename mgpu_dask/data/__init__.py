"""Data sets, the split protocol and sharding onto Dask workers."""

from __future__ import annotations

from .datasets import Dataset, DatasetUnavailable, load_dataset
from .idx import read_idx, write_idx
from .registry import DATASETS
from .shard import ShardInfo, detect_device, shard, shard_locations, worker_addresses
from .split import Split, split

__all__ = [
    "DATASETS", "Dataset", "DatasetUnavailable", "ShardInfo", "Split", "detect_device",
    "load_dataset", "read_idx", "shard", "shard_locations", "split", "worker_addresses",
    "write_idx",
]
