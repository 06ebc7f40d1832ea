"""Host rows handed to workers on the client's host through shared memory.

A NumPy array placed from the client travels, by default, inside its tasks:
pickled, through the scheduler and over TCP to each worker (what that costs:
``docs/performance-history.md``).  Where the workers run on the
client's host, :func:`share` writes the rows once into a file of the host's
shared memory (``/dev/shm``) and the tasks carry only its name (a
:class:`SharedRows`); each worker reads its rows from there into its own memory,
or through pinned memory to its GPU, each range copied on while the next is read
(:func:`read`).

The file is what a lost block is rebuilt from, as a graph's rows would be: it
lives while any future of the placed array does (:func:`release_with`).  After
the last of them, a few files are kept for the next rows to be written over
(writing into new pages of ``/dev/shm`` costs the kernel's allocation of each),
the others removed; all are removed when the client's process ends.  The client
writes through a mapping of each file that it keeps with the file: the rows of a
later fit are copied into pages already mapped, by several threads at once (a
``write`` into ``/dev/shm`` takes the file's lock, so threads writing one file
queue).  Files left
by a process that died are removed by the next one that shares rows.  A worker that
cannot read the client's files (another host, another ``/dev/shm``) is found once
per client and worker by a probe file, and the rows travel in the graph to it as
before.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import ctypes
import mmap
import os
import threading
import uuid
import weakref
from typing import Any

import numpy as np

from .stale_files import remove_dead

ROOT = "/dev/shm"
PREFIX = "mgpu-dask-rows"
MIN_BYTES = 1 << 20
"""Smaller arrays travel in the graph: a file and a probe would cost more than they save."""

KEPT_FILES = 2
"""Released files kept for reuse (this process's), at most."""
COPY_THREADS = max(1, min(8, os.cpu_count() or 1))
PIECE_BYTES = 4 << 20
"""Rows are written and read in ranges of at least this many bytes, up to
``COPY_THREADS`` at once."""

_lock = threading.Lock()
_same_host: "weakref.WeakKeyDictionary[Any, dict[str, bool]]" = weakref.WeakKeyDictionary()
_swept = False
_live: set[str] = set()   # files of this process that tasks may name
_kept: list[str] = []     # released files kept to be written over
_maps: dict[str, mmap.mmap] = {}  # the mapping this process wrote each of its files through
_copier: concurrent.futures.ThreadPoolExecutor | None = None


class SharedRows:
    """The name, dtype and shape of rows written by :func:`share` (what a task carries)."""

    __slots__ = ("path", "dtype", "shape", "__weakref__")

    def __init__(self, path: str, dtype: str, shape: tuple[int, ...]) -> None:
        self.path, self.dtype, self.shape = path, dtype, tuple(shape)

    def __reduce__(self) -> tuple:
        return SharedRows, (self.path, self.dtype, self.shape)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def __repr__(self) -> str:
        return f"SharedRows({self.path!r}, {self.dtype}, {self.shape})"


def read(shared: SharedRows, start: int | None = None, stop: int | None = None,
         device: str = "cpu") -> Any:
    """Rows ``start:stop`` of ``shared`` (run on a worker): a NumPy array of this
    process's, or on ``device="gpu"`` a CuPy array on the current GPU, read into
    pinned memory and copied from there at the link's speed (a range as soon as it
    is read)."""
    dtype = np.dtype(shared.dtype)
    first, last, _ = slice(start, stop).indices(shared.shape[0])
    shape = (max(0, last - first), *shared.shape[1:])
    row = dtype.itemsize * int(np.prod(shared.shape[1:], dtype=np.int64))
    nbytes = shape[0] * row
    if device == "gpu":
        import cupy

        pinned = cupy.cuda.alloc_pinned_memory(max(1, nbytes))  # CuPy's pool: kept for reuse
        host = np.frombuffer(pinned, dtype=np.uint8, count=nbytes)
        out = cupy.empty(shape, dtype=dtype)
        stream, gpu = cupy.cuda.get_current_stream(), cupy.cuda.runtime.getDevice()
    else:
        host = np.empty(nbytes, dtype=np.uint8)
    fd = os.open(shared.path, os.O_RDONLY)
    try:
        view, offset = memoryview(host), first * row

        def piece(a: int, b: int) -> None:
            begin = a
            while a < b:
                got = os.preadv(fd, [view[a:b]], offset + a)
                if not got:
                    raise OSError(f"{shared.path} ends {b - a} bytes short")
                a += got
            if device == "gpu" and b > begin:  # on to the GPU while other ranges are read
                cupy.cuda.runtime.setDevice(gpu)
                cupy.cuda.runtime.memcpyAsync(out.data.ptr + begin, host.ctypes.data + begin,
                                              b - begin, cupy.cuda.runtime.memcpyHostToDevice,
                                              stream.ptr)

        _in_pieces(piece, nbytes)
    finally:
        os.close(fd)
        if device == "gpu":
            stream.synchronize()  # before the pinned block goes back to the pool
    if device != "gpu":
        return host.view(dtype).reshape(shape)
    return out


def share(array: np.ndarray, client: Any, workers: list[str]) -> SharedRows | None:
    """``array`` written once to shared memory that every one of ``workers`` reads, or
    None where it should travel in the graph: a small array, no ``/dev/shm``, too little
    room in it, or a worker that cannot read the client's files."""
    if array.nbytes < MIN_BYTES or not os.path.isdir(ROOT) or not workers:
        return None
    try:
        room = os.statvfs(ROOT)
        if room.f_bavail * room.f_frsize < 2 * array.nbytes:
            return None
    except OSError:
        return None
    _sweep()
    if not reachable(client, workers):
        return None
    path = _new_path()
    try:
        _write(path, memoryview(np.ascontiguousarray(array)).cast("B"))
    except (OSError, ValueError):
        _unlink(path)
        return None
    shared = SharedRows(path, array.dtype.str, array.shape)
    with _lock:
        _live.add(path)
    # The client's own (never pickled with it); the process's end removes every file.
    weakref.finalize(shared, _release, path).atexit = False
    return shared


def _write(path: str, data: memoryview) -> None:
    """``data`` as the file ``path``: into a kept file's mapped pages where there is one.

    New pages are allocated before they are mapped: a full ``/dev/shm`` is then
    an error here, not a SIGBUS on a write through the mapping.
    """
    with _lock:
        kept = _kept.pop() if _kept else None
        mapping = _maps.pop(kept, None) if kept is not None else None
    if kept is not None:
        try:
            os.rename(kept, path)
        except OSError:
            _close(mapping)
            _unlink(kept)
            kept = mapping = None
    nbytes = data.nbytes
    fd = os.open(path, os.O_RDWR if kept is not None else os.O_RDWR | os.O_CREAT | os.O_EXCL,
                 0o600)
    try:
        if mapping is None or len(mapping) != nbytes:
            _close(mapping)
            mapping = None
            os.ftruncate(fd, nbytes)
            os.posix_fallocate(fd, 0, nbytes)
            mapping = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    except BaseException:
        _close(mapping)
        raise
    finally:
        os.close(fd)
    with _lock:
        _maps[path] = mapping
    target = np.frombuffer(mapping, dtype=np.uint8)
    source = np.frombuffer(data, dtype=np.uint8)
    try:  # ctypes' memmove lets go of the interpreter: the threads copy at once
        to, frm = target.ctypes.data, source.ctypes.data
        _in_pieces(lambda a, b: ctypes.memmove(to + a, frm + a, b - a), nbytes)
    finally:
        del target


def _close(mapping: mmap.mmap | None) -> None:
    if mapping is not None:
        with contextlib.suppress(BufferError, ValueError):  # a view left: it goes with it
            mapping.close()


def _in_pieces(copy: Any, nbytes: int) -> None:
    """``copy(a, b)`` over ``[0, nbytes)`` in a few ranges at once: one thread's copy
    through the kernel is far from the memory's bandwidth (reads and writes release the
    interpreter)."""
    n = max(1, min(COPY_THREADS, nbytes // PIECE_BYTES))
    edges = [nbytes * i // n for i in range(n + 1)]
    if n == 1:
        copy(0, nbytes)
        return
    global _copier
    with _lock:
        if _copier is None:
            _copier = concurrent.futures.ThreadPoolExecutor(COPY_THREADS,
                                                            thread_name_prefix="mgpu-dask-rows")
    for done in [_copier.submit(copy, a, b) for a, b in zip(edges[:-1], edges[1:])]:
        done.result()


def _release(path: str) -> None:
    """The file's rows are no longer named by any task: keep it to write over, or remove."""
    with _lock:
        _live.discard(path)
        keep = len(_kept) < KEPT_FILES
        if keep:
            kept = _new_path()
            try:
                os.rename(path, kept)
                _kept.append(kept)
                if path in _maps:
                    _maps[kept] = _maps.pop(path)
                return
            except OSError:
                pass
    _unlink(path)


@atexit.register
def _remove_all() -> None:
    with _lock:
        paths = [*_live, *_kept]
        _live.clear()
        _kept.clear()
    for path in paths:
        _unlink(path)


def release_with(futures: list, shared: SharedRows | None) -> None:
    """Keep ``shared``'s file while any of ``futures`` lives (the placed blocks built
    from it, which a lost worker's copy is rebuilt from); released after the last."""
    if shared is None:
        return
    alive = [f for f in futures if f is not None]
    if not alive:
        return
    left = [len(alive)]
    holder = [shared]  # the SharedRows itself: its finalizer releases the file

    def one_gone() -> None:
        with _lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            holder.clear()  # outside the lock: the finalizer takes it

    for future in alive:
        weakref.finalize(future, one_gone).atexit = False


def reachable(client: Any, workers: list[str]) -> bool:
    """Whether every one of ``workers`` reads files this process writes to ``ROOT``
    (asked once per client and worker, by a probe file)."""
    with _lock:
        known = _same_host.setdefault(client, {})
        unknown = [w for w in workers if w not in known]
    if unknown:
        token = uuid.uuid4().hex
        path = _new_path()
        got: dict = {}
        try:
            with open(path, "x") as f:
                f.write(token)
            got = client.run(_holds, path, token, workers=unknown)
        except Exception:  # a worker gone, or no room for the probe: the graph, as before
            got = {}
        finally:
            _unlink(path)
        with _lock:
            for w in unknown:
                known[w] = got.get(w) is True
    return all(known.get(w, False) for w in workers)


def _holds(path: str, token: str) -> bool:
    """On a worker: whether it reads the probe file the client just wrote."""
    try:
        with open(path) as f:
            return f.read() == token
    except OSError:
        return False


def _new_path() -> str:
    return os.path.join(ROOT, f"{PREFIX}-{os.getpid()}-{uuid.uuid4().hex[:16]}")


def _unlink(path: str) -> None:
    with _lock:
        mapping = _maps.pop(path, None)
    _close(mapping)
    with contextlib.suppress(OSError):
        os.unlink(path)


def _sweep() -> None:
    """Remove the files of processes that ended without removing theirs (once a process)."""
    global _swept
    if _swept:
        return
    _swept = True
    remove_dead(os.path.join(ROOT, f"{PREFIX}-*-*"),
                lambda name: int(name[len(PREFIX) + 1:].split("-")[0]))
