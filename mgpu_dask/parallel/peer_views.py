"""Views of other workers' shards from one process on the same host.

A worker *exports* its row blocks: they are copied once into memory that
another process can map — a plain ``cudaMalloc`` allocation shared through
CUDA IPC for CuPy blocks, a POSIX shared-memory segment for NumPy blocks — and
described by a small picklable dict.  One process then *opens* every
description and computes on all shards itself, each on its own GPU, with no
Dask message per step (see ``logreg``'s single-host fit).  The data stay where
they are; nothing but the descriptions travels.

Only workers of one host can share this way.  Opening refuses what it cannot
map (another host, a GPU this process does not see) with
:class:`PeerUnavailable`, so callers can fall back to message passing.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np

from ..config.environment import is_installed
from ..exceptions import MgpuDaskError
from ..kernels.launch import all_entries_finite, array_module, on_gpu
from .stale_files import remove_dead

# Exports this process keeps alive for its readers: token -> [(export id, arrays, owners)].
_EXPORTS: dict[str, list[tuple[str, list[Any], list[Any]]]] = {}
_LOCK = threading.Lock()
# CUDA exports of other processes mapped here: (device, handle) -> [pointer, readers].
_OPEN: dict[tuple[int, bytes], list[Any]] = {}
_OPEN_LOCK = threading.Lock()
_COUNTER = itertools.count()


class PeerUnavailable(MgpuDaskError):
    """The exported shards cannot be mapped from this process."""


def _hostname() -> str:
    return socket.gethostname()


def _segment_name(token: str, index: int) -> str:
    return f"mgpu_{token[:16]}_{os.getpid()}_{index}"


def _untrack(shm: Any) -> None:
    # Python < 3.13 registers every attached segment with the resource tracker,
    # which would unlink it when *this* process exits; we unlink explicitly.
    from multiprocessing import resource_tracker

    try:
        resource_tracker.unregister(shm._name, "shared_memory")
    except Exception:  # pragma: no cover - tracker already gone
        pass


def _unlink(shm: Any) -> None:
    # Not ``shm.unlink()``: it would also message the resource tracker about a
    # segment we took off its list (see ``_untrack``).
    import _posixshmem

    try:
        _posixshmem.shm_unlink(shm._name)
    except FileNotFoundError:  # the other side unlinked it already
        pass


def _share_host(array: np.ndarray, name: str) -> tuple[np.ndarray, Any, dict[str, Any]]:
    from multiprocessing import shared_memory

    if os.name != "posix":
        raise PeerUnavailable("host shards are shared through POSIX shared memory only")
    shm = shared_memory.SharedMemory(name=name, create=True, size=max(1, array.nbytes))
    _untrack(shm)
    view = np.ndarray(array.shape, dtype=array.dtype, buffer=shm.buf)
    view[...] = array
    return view, shm, {"kind": "host", "name": name}


def _share_cuda(array: Any, owned: bool = False) -> tuple[Any, Any, dict[str, Any]]:
    import cupy

    # A dedicated allocation (not a slice of CuPy's pool): an IPC handle names a
    # whole allocation, and Dask may spill or drop its own copy of the block.  An
    # owned array that is one already (``dedicated``) is shared as it is.
    memory = array.data.mem
    if not (owned and type(memory) is cupy.cuda.memory.Memory and array.data.ptr == memory.ptr
            and array.flags.c_contiguous):
        view = dedicated(array.shape, array.dtype)
        view[...] = array
        array, memory = view, view.data.mem
    return array, memory, {"kind": "cuda", "handle": cupy.cuda.runtime.ipcGetMemHandle(memory.ptr)}


def dedicated(shape: tuple[int, ...], dtype: Any) -> Any:
    """An empty CuPy array in an allocation of its own (not a slice of CuPy's pool), on
    the current GPU: what :func:`export` can share ``owned`` without a copy."""
    import cupy

    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    memory = cupy.cuda.memory.Memory(max(1, nbytes))
    return cupy.ndarray(shape, dtype=dtype, memptr=cupy.cuda.MemoryPointer(memory, 0))


def export(token: str, groups: list[list[Any]], in_place: bool = False, owned: bool = False,
           info: dict[str, Any] | None = None) -> dict[str, Any]:
    """Concatenate each group of blocks into shareable memory; describe it.

    Runs on the worker holding the blocks.  Each group (e.g. the X blocks,
    then the label blocks) becomes one array.  ``in_place``: for a reader in
    this same process (the fit's leader exporting its own rows), no copy --
    a single block is used as it is -- and no handle: another process that
    tries to open it gets :class:`PeerUnavailable`.  ``owned``: single GPU
    blocks made for this export by :func:`dedicated` are shared as they are
    (no copy; others are copied); the export keeps them.  ``info`` travels
    with the description.

    Returns
    -------
    dict
        Host, process, worker address, GPU PCI bus id (or None), rows, whether
        every floating-point array is finite, and one entry per array.
    """
    arrays, owners, entries = [], [], []
    export_id = f"{os.getpid()}-{next(_COUNTER)}"
    gpu = False
    for index, blocks in enumerate(groups):
        xp = array_module(blocks[0])
        whole = blocks[0] if len(blocks) == 1 else xp.concatenate(blocks)
        gpu = on_gpu(whole)
        if in_place:
            view, owner, entry = whole, None, {"kind": "local"}
        else:
            view, owner, entry = (_share_cuda(whole, owned and len(blocks) == 1) if gpu else
                                  _share_host(np.ascontiguousarray(whole),
                                              _segment_name(token, next(_COUNTER))))
        arrays.append(view)
        owners.append(owner)
        entries.append({**entry, "shape": tuple(whole.shape), "dtype": whole.dtype.str,
                        "nbytes": int(whole.nbytes)})
    finite = all(all_entries_finite(a) for a in arrays if np.issubdtype(a.dtype, np.floating))
    pci = None
    if gpu:
        import cupy

        pci = cupy.cuda.Device(arrays[0].device.id).pci_bus_id
        cupy.cuda.get_current_stream().synchronize()  # the copies are there for the reader
    with _LOCK:
        _EXPORTS.setdefault(token, []).append((export_id, arrays, owners))
    try:
        from distributed import get_worker

        address = get_worker().address
    except ValueError:
        address = None
    return {"token": token, "id": export_id, "host": _hostname(), "pid": os.getpid(),
            "address": address, "pci_bus_id": pci, "rows": int(arrays[0].shape[0]),
            "finite": finite, "arrays": entries, "info": info or {}}


def release(token: str) -> int:
    """Drop this process's exports for ``token`` (unlinking shared segments); returns how many.

    Also unlinks the segments of ``token`` left by exporters that have died
    (a killed worker's export is made again elsewhere; its segments would
    otherwise stay in ``/dev/shm``).
    """
    _sweep_dead_exporters(token)
    with _LOCK:
        dropped = _EXPORTS.pop(token, [])
    for _, arrays, owners in dropped:
        arrays.clear()
        for owner in owners:
            if hasattr(owner, "unlink"):
                try:
                    owner.close()
                except BufferError:  # a view is still alive here; the mapping goes with it
                    pass
                _unlink(owner)
    return len(dropped)


def _sweep_dead_exporters(token: str) -> None:
    # a dead exporter's segments: nobody else would unlink them
    remove_dead(f"/dev/shm/mgpu_{token[:16]}_*", lambda name: int(name.split("_")[2]))


def _local(desc: dict[str, Any]) -> list[Any]:
    with _LOCK:
        for export_id, arrays, _ in _EXPORTS.get(desc["token"], []):
            if export_id == desc["id"]:
                return list(arrays)
    raise PeerUnavailable(f"export {desc['id']} is no longer held by this process")


def device_for(pci_bus_id: str) -> int:
    """This process's number of the GPU at ``pci_bus_id`` (:class:`PeerUnavailable` where it
    does not see it)."""
    import cupy

    try:
        return int(cupy.cuda.runtime.deviceGetByPCIBusId(pci_bus_id))
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        raise PeerUnavailable(f"GPU {pci_bus_id} is not visible to this process "
                              f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')})"
                              ) from exc


@contextmanager
def opened(descriptions: list[dict[str, Any]]) -> Iterator[list[list[Any]]]:
    """Map every exported shard here; yields one list of arrays per description.

    CUDA shards are opened on their own GPU (found by PCI bus id).  On exit
    the mappings are closed and shared host segments unlinked (the exporters
    no longer need them); the caller must drop its references to the arrays
    before leaving the block.

    Raises
    ------
    PeerUnavailable
        A shard lives on another host or on a GPU this process cannot see.
    """
    host = _hostname()
    closers: list[Any] = []
    shards: list[list[Any]] = []
    try:
        for desc in descriptions:
            if desc["host"] != host:
                raise PeerUnavailable(f"a shard lives on host {desc['host']!r}, not {host!r}")
            if desc["pid"] == os.getpid():
                shards.append(_local(desc))
                continue
            arrays = []
            for entry in desc["arrays"]:
                if entry["kind"] == "local":
                    raise PeerUnavailable(f"export {desc['id']} was made in place for a reader "
                                          "in its own process")
                if entry["kind"] == "cuda":
                    arrays.append(_open_cuda(entry, device_for(desc["pci_bus_id"]), closers))
                else:
                    arrays.append(_open_host(entry, closers))
            shards.append(arrays)
        yield shards
    finally:
        shards.clear()
        for close in reversed(closers):
            close()


def _open_cuda(entry: dict[str, Any], device: int, closers: list[Any]) -> Any:
    """Map a CUDA export on ``device``.  CUDA maps one allocation's handle once per
    process (opening it again while open fails), so the mappings are counted: a
    second reader of the same allocation (a mapping kept between fits, and a fit that
    has the same rows exported again) shares the first one's; the last close unmaps it."""
    import cupy

    if not is_installed("cupy"):  # pragma: no cover - exporters had CuPy
        raise PeerUnavailable("CuPy is not installed in this process")
    key = (device, bytes(entry["handle"]))
    with _OPEN_LOCK:
        found = _OPEN.get(key)
        if found is None:
            with cupy.cuda.Device(device):
                try:
                    ptr = cupy.cuda.runtime.ipcOpenMemHandle(entry["handle"])
                except cupy.cuda.runtime.CUDARuntimeError as exc:
                    raise PeerUnavailable(f"cannot map a shard on GPU {device} through CUDA "
                                          f"IPC ({exc}); was its worker lost?") from exc
            found = _OPEN[key] = [ptr, 0]
        found[1] += 1
        ptr = found[0]

    def close() -> None:
        with _OPEN_LOCK:
            found[1] -= 1
            if found[1]:
                return
            del _OPEN[key]
            with cupy.cuda.Device(device):
                cupy.cuda.runtime.ipcCloseMemHandle(ptr)

    closers.append(close)
    memory = cupy.cuda.UnownedMemory(ptr, entry["nbytes"], owner=None, device_id=device)
    return cupy.ndarray(entry["shape"], dtype=np.dtype(entry["dtype"]),
                        memptr=cupy.cuda.MemoryPointer(memory, 0))


def exported() -> int:
    """How many tokens this process holds exports for (for tests)."""
    with _LOCK:
        return len(_EXPORTS)


def mapped() -> int:
    """How many CUDA exports of other processes this process maps now (for tests)."""
    with _OPEN_LOCK:
        return len(_OPEN)


def _open_host(entry: dict[str, Any], closers: list[Any]) -> np.ndarray:
    from multiprocessing import shared_memory

    try:
        shm = shared_memory.SharedMemory(name=entry["name"])
    except FileNotFoundError as exc:
        raise PeerUnavailable(f"shared segment {entry['name']} is gone; was its worker lost?"
                              ) from exc
    _untrack(shm)

    def close() -> None:
        try:
            shm.close()
        except BufferError:  # pragma: no cover - a view outlived the block
            pass
        _unlink(shm)

    closers.append(close)
    return np.ndarray(entry["shape"], dtype=np.dtype(entry["dtype"]), buffer=shm.buf)
