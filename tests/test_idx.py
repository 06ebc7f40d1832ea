from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest

from mgpu_dask.data.idx import parse_idx, read_idx, write_idx
from mgpu_dask.exceptions import DataError


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64])
@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_round_trip(tmp_path, dtype, suffix):
    rng = np.random.default_rng()
    array = (rng.standard_normal((7, 3, 5)) * 50).astype(dtype)
    path = tmp_path / f"a-idx3-ubyte{suffix}"
    write_idx(path, array)
    out = read_idx(path, ndim=3)
    assert out.dtype == np.dtype(dtype).newbyteorder("=")
    np.testing.assert_array_equal(out, array)


def test_header_is_big_endian_mnist_magic(tmp_path):
    path = tmp_path / "x"
    write_idx(path, np.zeros((2, 28, 28), np.uint8) + 3)
    assert struct.unpack(">IIII", path.read_bytes()[:16]) == (2051, 2, 28, 28)
    write_idx(path, np.arange(5, dtype=np.uint8))
    assert struct.unpack(">II", path.read_bytes()[:8]) == (2049, 5)


def test_wrong_magic():
    with pytest.raises(DataError, match="magic number 305419896"):
        parse_idx(struct.pack(">IIII", 0x12345678, 1, 1, 1) + b"\0")


def test_wrong_ndim_says_which():
    raw = struct.pack(">II", 2049, 3) + b"\1\2\3"
    with pytest.raises(DataError, match="1 dimensions, expected 3"):
        parse_idx(raw, ndim=3)


def test_truncated_data_and_trailing_bytes():
    raw = struct.pack(">IIII", 2051, 2, 2, 2) + bytes(8)
    assert parse_idx(raw).shape == (2, 2, 2)
    with pytest.raises(DataError, match="truncated"):
        parse_idx(raw[:-1])
    with pytest.raises(DataError, match="unexpected bytes"):
        parse_idx(raw + b"\0")
    with pytest.raises(DataError, match="header"):
        parse_idx(raw[:9])
    with pytest.raises(DataError, match="too short"):
        parse_idx(b"\0\0")


def test_truncated_gz(tmp_path):
    path = tmp_path / "t-idx1-ubyte.gz"
    write_idx(path, np.arange(200, dtype=np.uint8))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match="truncated or not a valid gzip"):
        read_idx(path)


def test_not_gzip(tmp_path):
    path = tmp_path / "t-idx1-ubyte.gz"
    path.write_bytes(b"plain text, not gzip")
    with pytest.raises(DataError, match="gzip"):
        read_idx(path)


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        read_idx(tmp_path / "nope.gz")


def test_gz_payload_with_bad_header(tmp_path):
    path = tmp_path / "bad-idx3-ubyte.gz"
    with gzip.open(path, "wb") as f:
        f.write(b"\x01\x02\x03\x04" + bytes(32))
    with pytest.raises(DataError, match="not an IDX header"):
        read_idx(path)
