"""Other workers' shards copied into the leader's own memory on their GPUs.

The leader of a single-host fit maps every other worker's shard by CUDA IPC and, one
worker per GPU, evaluates each on its own GPU.  Kernels read such a mapping more slowly
than memory of their own process, a long evaluation too (``docs/performance-history.md``
has the figures).  Where the shard's GPU has room, the leader copies its
rows and class indices there once (device to device) and its evaluations read the copy;
the mapping stays as it was (kept with the fit, released with the rows), and the copy
goes with it.  Shards joined on the leader's GPU (:mod:`.joined`) are copies already;
int8 levels (their own layout) and weighted rows stay mapped.
"""

from __future__ import annotations

from typing import Any

ROOM_SHARE = 0.5
"""A copy takes at most this share of its GPU's free memory: the rows stay twice on that
GPU while the fit keeps them (the holder's blocks and the copy), so a GPU near full keeps
reading the mapping."""


def room_for(nbytes: int, free: int) -> bool:
    """Whether a copy of ``nbytes`` fits in :data:`ROOM_SHARE` of ``free`` bytes."""
    return nbytes <= ROOM_SHARE * free


def of_mapped(arrays: list[tuple[Any, ...]], mapped: list[bool]) -> tuple[list[tuple], int]:
    """``arrays`` (``(rows, class indices, ...)`` per shard) with each shard that ``mapped``
    says is another process's, its rows a CuPy array, replaced by copies of its rows and
    class indices on its GPU where there is room (:func:`room_for`); the copies are done
    when this returns.  Also returns how many shards were copied."""
    out, copied, devices = [], 0, set()
    for shard, theirs in zip(arrays, mapped):
        X, labels = shard[0], shard[1]
        if theirs and type(X).__module__.startswith("cupy"):
            import cupy

            with cupy.cuda.Device(X.device.id):
                if room_for(X.nbytes + labels.nbytes, cupy.cuda.runtime.memGetInfo()[0]):
                    shard = (X.copy(), labels.copy(), *shard[2:])
                    copied += 1
                    devices.add(X.device.id)
        out.append(shard)
    if devices:
        import cupy

        for device in devices:
            with cupy.cuda.Device(device):
                cupy.cuda.get_current_stream().synchronize()
    return out, copied
