"""Data sets (IDX files, registry and checksums, download, deformed copies), the split
protocol, sharding onto Dask workers, and result files written atomically."""

from __future__ import annotations

from ..parallel.workers import detect_device, worker_addresses
from .datasets import Dataset, DatasetUnavailable, load_dataset
from .idx import read_idx, write_idx
from .registry import DATASETS
from .shard import ShardInfo, shard, shard_locations
from .split import Split, split

__all__ = [
    "DATASETS", "Dataset", "DatasetUnavailable", "ShardInfo", "Split", "detect_device",
    "load_dataset", "read_idx", "shard", "shard_locations", "split", "worker_addresses",
    "write_idx",
]
