"""Settings and what this machine has.

:mod:`.settings` merges the packaged defaults (``mgpu_dask.yaml``,
``jobqueue.yaml``) into ``dask.config`` and reads them back (``get``,
``seconds``, the data and cache folders); :mod:`.environment` finds optional
packages and GPUs without touching CUDA.
"""

from __future__ import annotations

from .settings import cache_dir, data_dir, get, seconds

__all__ = ["cache_dir", "data_dir", "get", "seconds"]
