"""Arrays handed from one worker's GPU to another's on the same host, device to device.

A straight predict's shard holders hand each other query blocks and candidates
(``knn.blocks``).  Through host memory and a lane's socket a few megabytes took
4-8 ms each way (device to host, the socket, host to device); here they go over
NVLink or PCIe by one copy.  The array's reader keeps *inboxes*: allocations of its
own GPU, each exported once through CUDA IPC (:func:`take`, whose :attr:`Inbox.desc`
travels to the writer).  The writer maps an inbox once per process (:func:`copy_into`),
copies its CuPy array into it, waits for the copy and says so; the reader then reads
the inbox in place (:meth:`Inbox.view`) and gives it back (:func:`give_back`) once
its kernels are done with it.  Nothing is written to an inbox its reader holds but did
not hand out, and an inbox is only ever freed with its process: another process may
still map it.

Where a copy cannot be made -- another host, a GPU the writer does not see, a host
array, an inbox too small -- :func:`copy_into` says False and the caller sends the
array through host memory as before.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
from typing import Any, NamedTuple

import numpy as np

from ..kernels.launch import on_gpu
from .peer_views import device_for

_FREE: list["Inbox"] = []     # inboxes of this process no one holds
_LENT: dict[int, "Inbox"] = {}  # inboxes handed out by id, until given back
_OPEN: dict[tuple[str, int, bytes], tuple[int, int]] = {}  # another's inbox -> (ptr, device)
_LOCK = threading.Lock()
_IDS = itertools.count(1)
QUANTUM = 1 << 20
"""Inboxes are made in multiples of this many bytes, so that blocks of nearly one size
share them."""
COPIED = [0]
"""Arrays this process copied into another's inbox (for the tests)."""


class Landed(NamedTuple):
    """What a writer answers once its array is in the reader's inbox ``box``."""

    box: int
    shape: tuple[int, ...]
    dtype: str


class Inbox:
    """An allocation of this process's GPU ``device`` that another process may write:
    ``desc`` (picklable: host, process, the GPU's PCI bus id, the IPC handle, the
    capacity in bytes, an id) is what the writer needs."""

    def __init__(self, nbytes: int) -> None:
        import cupy

        self.device = cupy.cuda.Device().id
        self.capacity = -(-max(1, nbytes) // QUANTUM) * QUANTUM
        self.memory = cupy.cuda.memory.Memory(self.capacity)  # its own cudaMalloc
        self.id = next(_IDS)
        self.desc = {"host": socket.gethostname(), "pid": os.getpid(), "box": self.id,
                     "pci_bus_id": cupy.cuda.Device(self.device).pci_bus_id,
                     "handle": bytes(cupy.cuda.runtime.ipcGetMemHandle(self.memory.ptr)),
                     "capacity": self.capacity}

    def view(self, shape: tuple[int, ...], dtype: Any) -> Any:
        """The inbox's first bytes as a CuPy array of ``shape`` and ``dtype``."""
        import cupy

        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        if nbytes > self.capacity:
            raise ValueError(f"{nbytes} bytes do not fit an inbox of {self.capacity}")
        return cupy.ndarray(tuple(shape), dtype=np.dtype(dtype),
                            memptr=cupy.cuda.MemoryPointer(self.memory, 0))


def take(nbytes: int) -> Inbox | None:
    """A free inbox of at least ``nbytes`` on the current GPU, made where none is; None
    where this process has no GPU or CUDA IPC will not export one."""
    try:
        import cupy

        device = cupy.cuda.Device().id
    except Exception:  # noqa: BLE001 - no CuPy or no GPU: host memory it is
        return None
    with _LOCK:
        fits = [b for b in _FREE if b.device == device and b.capacity >= nbytes]
        if fits:
            box = min(fits, key=lambda b: b.capacity)
            _FREE.remove(box)
            _LENT[box.id] = box
            return box
    try:
        box = Inbox(nbytes)
    except Exception:  # noqa: BLE001 - out of memory, or no IPC here
        return None
    with _LOCK:
        _LENT[box.id] = box
    return box


def lent(box: int) -> Inbox | None:
    """This process's inbox ``box`` (an id from its ``desc``), while handed out."""
    with _LOCK:
        return _LENT.get(box)


def give_back(*boxes: Inbox | int | None) -> None:
    """The inboxes (or their ids) free again: their readers are done with them."""
    with _LOCK:
        for box in boxes:
            found = _LENT.pop(box if isinstance(box, int) else box.id, None) \
                if box is not None else None
            if found is not None:  # kept for good: another process may map it
                _FREE.append(found)


def _mapped(desc: dict[str, Any]) -> tuple[int, int] | None:
    """Another process's inbox mapped here, once per process: (pointer, device)."""
    import cupy

    key = (desc["host"], desc["pid"], desc["handle"])
    with _LOCK:
        found = _OPEN.get(key)
    if found is not None:
        return found
    try:
        device = device_for(desc["pci_bus_id"])
        with cupy.cuda.Device(device):
            ptr = cupy.cuda.runtime.ipcOpenMemHandle(desc["handle"])
    except Exception:  # noqa: BLE001 - a GPU this process does not see, or no IPC
        return None
    with _LOCK:
        _OPEN[key] = (ptr, device)
    return ptr, device


_STREAMS = threading.local()  # each thread's copy streams, by device


def copy_stream(device: int) -> Any:
    """This thread's stream for copies on ``device``, made once: a stream of its own, so
    that a copy is not queued behind this worker's other work (its own search)."""
    import cupy

    streams = getattr(_STREAMS, "by_device", None)
    if streams is None:
        streams = _STREAMS.by_device = {}
    if device not in streams:
        streams[device] = cupy.cuda.Stream(non_blocking=True)
    return streams[device]


def copy_into(desc: dict[str, Any] | None, array: Any) -> Landed | None:
    """Copy CuPy ``array`` into the inbox ``desc`` names (another process's, on this host)
    and wait for the copy; what to tell the reader, or None where it cannot be done here
    (no inbox, another host or this process, a host array, too large, a GPU not seen, a
    copy that failed)."""
    if (desc is None or not on_gpu(array) or desc["host"] != socket.gethostname()
            or desc["pid"] == os.getpid() or array.nbytes > desc["capacity"]):
        return None
    mapped = _mapped(desc)
    if mapped is None:
        return None
    import cupy

    ptr, device = mapped
    try:
        with cupy.cuda.Device(array.device.id):
            src = cupy.ascontiguousarray(array)
            made = cupy.cuda.get_current_stream().record()
            stream = copy_stream(array.device.id)
            stream.wait_event(made)
            cupy.cuda.runtime.memcpyPeerAsync(ptr, device, src.data.ptr, src.device.id,
                                              src.nbytes, stream.ptr)
            stream.synchronize()
    except cupy.cuda.runtime.CUDARuntimeError:  # the reader's process gone, say: the
        return None                             # array goes through host memory instead
    COPIED[0] += 1
    return Landed(desc["box"], tuple(array.shape), array.dtype.str)
