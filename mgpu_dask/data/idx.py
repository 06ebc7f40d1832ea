"""Reading IDX files (the MNIST format), with every header field checked.

An IDX file starts with two zero bytes, a type code, the number of dimensions,
then one big-endian uint32 per dimension, then the data in C order.  MNIST's
"magic numbers" 2051 and 2049 are that header read as one integer: type 0x08
(uint8) with 3 or 1 dimensions.
"""

from __future__ import annotations

import concurrent.futures
import gzip
import struct
import threading
import zlib
from pathlib import Path
from typing import Iterable

import numpy as np

from ..exceptions import DataError

_TYPES: dict[int, np.dtype] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


_AHEAD: dict[str, tuple[tuple[int, int], concurrent.futures.Future]] = {}
_AHEAD_LOCK = threading.Lock()


def _stamp(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns


def read_ahead(paths: Iterable[Path]) -> None:
    """Start reading (and decompressing) these files, each on a thread of its own.

    The next :func:`read_bytes` of each takes the content from there, once, if the
    file has not changed since (its size and modification time).  Decompression
    releases the GIL, so a caller can import or start other work meanwhile.  A
    file that cannot be read here raises its error at that :func:`read_bytes`.
    """
    for path in paths:
        try:
            key, stamp = str(Path(path).resolve()), _stamp(Path(path))
        except OSError:
            continue  # read_bytes reports it
        future: concurrent.futures.Future = concurrent.futures.Future()

        def run(path: Path = Path(path), future: concurrent.futures.Future = future) -> None:
            try:
                future.set_result(_read(path))
            except BaseException as exc:  # handed to read_bytes
                future.set_exception(exc)

        with _AHEAD_LOCK:
            _AHEAD[key] = (stamp, future)
        threading.Thread(target=run, name=f"mgpu-dask-read {Path(path).name}",
                         daemon=True).start()


def read_bytes(path: Path) -> bytes:
    """The file's content, decompressed when it ends in ``.gz`` (from :func:`read_ahead`
    where it was started and the file is unchanged)."""
    with _AHEAD_LOCK:
        ahead = _AHEAD.pop(str(path.resolve()), None) if _AHEAD else None
    if ahead is not None:
        stamp, future = ahead
        try:
            unchanged = _stamp(path) == stamp
        except OSError:
            unchanged = False
        if unchanged:
            return future.result()
    return _read(path)


def _read(path: Path) -> bytes:
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                return f.read()
        return path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path} does not exist") from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise DataError(
            f"{path} is truncated or not a valid gzip file ({exc}); delete it and fetch it again"
        ) from None
    except OSError as exc:
        raise DataError(f"{path} could not be read ({exc})") from None


def parse_idx(raw: bytes, *, source: str = "<bytes>", ndim: int | None = None) -> np.ndarray:
    """Parse IDX bytes into an array of native byte order.

    Parameters
    ----------
    raw : bytes
        The whole (decompressed) file.
    source : str, default "<bytes>"
        Name used in error messages.
    ndim : int or None, default None
        The number of dimensions expected (3 for images, 1 for labels).

    Raises
    ------
    DataError
        On a bad magic number, unexpected dimensions, or a data length that
        does not match the header (truncated file or trailing bytes).
    """
    if len(raw) < 4:
        raise DataError(f"{source}: {len(raw)} bytes is too short for an IDX header")
    zero, type_code, n_dims = struct.unpack(">HBB", raw[:4])
    magic = struct.unpack(">I", raw[:4])[0]
    if zero != 0 or type_code not in _TYPES or n_dims == 0:
        raise DataError(
            f"{source}: magic number {magic} (0x{magic:08x}) is not an IDX header; "
            "expected e.g. 2051 for images or 2049 for labels"
        )
    if ndim is not None and n_dims != ndim:
        raise DataError(
            f"{source}: magic number {magic} says {n_dims} dimensions, expected {ndim} "
            f"(is this an {'image' if n_dims == 3 else 'label'} file in the wrong place?)"
        )
    header_end = 4 + 4 * n_dims
    if len(raw) < header_end:
        raise DataError(f"{source}: truncated in the header ({len(raw)} bytes)")
    shape = struct.unpack(f">{n_dims}I", raw[4:header_end])
    dtype = _TYPES[type_code]
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    got = len(raw) - header_end
    if got < expected:
        raise DataError(
            f"{source}: truncated, header promises {expected} data bytes for shape "
            f"{shape} but the file holds {got}; delete it and fetch it again"
        )
    if got > expected:
        raise DataError(
            f"{source}: {got - expected} unexpected bytes after the data for shape {shape}"
        )
    data = np.frombuffer(raw, dtype=dtype, offset=header_end).reshape(shape)
    return data.astype(dtype.newbyteorder("="), copy=False)


def read_idx(path: Path, *, ndim: int | None = None) -> np.ndarray:
    """Read and validate one IDX file (``.gz`` or uncompressed)."""
    return parse_idx(read_bytes(path), source=str(path), ndim=ndim)


def write_idx(path: Path, array: np.ndarray) -> None:
    """Write ``array`` as an IDX file (gzip-compressed when ``path`` ends in ``.gz``)."""
    codes = {np.dtype(v).newbyteorder("="): k for k, v in _TYPES.items()}
    dtype = array.dtype.newbyteorder("=")
    if dtype not in codes:
        raise DataError(f"dtype {array.dtype} has no IDX type code; use one of {list(codes)}")
    header = struct.pack(">HBB", 0, codes[dtype], array.ndim)
    header += struct.pack(f">{array.ndim}I", *array.shape)
    body = np.ascontiguousarray(array, dtype=_TYPES[codes[dtype]]).tobytes()
    if path.suffix == ".gz":
        with gzip.open(path, "wb") as f:
            f.write(header + body)
    else:
        path.write_bytes(header + body)
