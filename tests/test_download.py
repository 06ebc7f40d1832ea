from __future__ import annotations

import shutil

import dask
import pytest

from mgpu_dask.data import load_dataset
from mgpu_dask.data.datasets import DatasetUnavailable
from mgpu_dask.data.download import DownloadError, download, sha256_of
from mgpu_dask.data.registry import MNIST


def _no_partial_files(folder):
    return not any(p.name.startswith(".part-") for p in folder.rglob("*"))


def test_download_verifies_and_renames(http_root, tmp_path):
    root, url = http_root
    (root / "f.bin").write_bytes(b"hello mirror")
    want = sha256_of(root / "f.bin")
    out = download("f.bin", want, [url], tmp_path / "dest")
    assert out.read_bytes() == b"hello mirror" and _no_partial_files(tmp_path / "dest")


def test_corrupt_mirror_is_skipped(http_root, tmp_path):
    root, url = http_root
    (root / "good").mkdir()
    (root / "bad").mkdir()
    (root / "good" / "f.bin").write_bytes(b"right bytes")
    (root / "bad" / "f.bin").write_bytes(b"wrong bytes")
    want = sha256_of(root / "good" / "f.bin")
    out = download("f.bin", want, [f"{url}/bad", f"{url}/good"], tmp_path / "d")
    assert out.read_bytes() == b"right bytes"


def test_all_mirrors_bad_leaves_nothing(http_root, tmp_path):
    root, url = http_root
    (root / "f.bin").write_bytes(b"wrong bytes")
    dest = tmp_path / "d"
    with pytest.raises(DownloadError, match="checksum mismatch") as info:
        download("f.bin", "0" * 64, [url, f"{url}/missing", "http://127.0.0.1:9/"], dest)
    assert "404" in str(info.value) or "Not Found" in str(info.value)
    assert list(dest.iterdir()) == []


def test_mnist_download_from_loopback_mirror(mnist_dir, http_root, isolated):
    root, url = http_root
    for entry in MNIST.files:
        shutil.copy(mnist_dir / f"{entry.stem}.gz", root)
    with dask.config.set({"mgpu-dask.data.mirrors.mnist": ["http://127.0.0.1:9/", url]}):
        ds = load_dataset("mnist")
    assert ds.verified and ds.source.startswith("downloaded") and ds.X.shape == (70000, 784)
    cached = sorted(p.name for p in (isolated / "mnist").iterdir())
    assert cached == sorted(f"{e.stem}.gz" for e in MNIST.files)
    # Second time: served from the cache, no mirror needed.
    with dask.config.set({"mgpu-dask.data.mirrors.mnist": []}):
        again = load_dataset("mnist")
    assert again.source.startswith("cache")


def test_mnist_corrupted_copy_is_rejected(mnist_dir, http_root, isolated):
    root, url = http_root
    for entry in MNIST.files:
        shutil.copy(mnist_dir / f"{entry.stem}.gz", root)
    corrupt = bytearray((root / "train-labels-idx1-ubyte.gz").read_bytes())
    corrupt[-20] ^= 0xFF
    (root / "train-labels-idx1-ubyte.gz").write_bytes(bytes(corrupt))
    with dask.config.set({"mgpu-dask.data.mirrors.mnist": [url]}):
        with pytest.raises(DatasetUnavailable, match="checksum mismatch"):
            load_dataset("mnist")
        fallback = load_dataset(None)
    assert fallback.name == "digits"
    cache = isolated / "mnist"
    assert not (cache / "train-labels-idx1-ubyte.gz").exists() and _no_partial_files(cache)
