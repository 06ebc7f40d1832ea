from __future__ import annotations

import gzip
import hashlib
import shutil

import numpy as np
import pytest
from conftest import make_idx_dir

from mgpu_dask.data import load_dataset
from mgpu_dask.data.datasets import DatasetUnavailable
from mgpu_dask.data.registry import MNIST
from mgpu_dask.exceptions import DataError


def _independent_read(path, offset):
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)


def test_real_mnist_loads_and_verifies(mnist_dir):
    ds = load_dataset("mnist", data_dir=mnist_dir, verify=True)
    assert ds.verified and ds.n_classes == 10
    assert ds.X.shape == (70000, 784) and ds.X.dtype == np.uint8
    train_labels = _independent_read(mnist_dir / "train-labels-idx1-ubyte.gz", 8)
    test_images = _independent_read(mnist_dir / "t10k-images-idx3-ubyte.gz", 16).reshape(-1, 784)
    np.testing.assert_array_equal(ds.y[:60000], train_labels)
    np.testing.assert_array_equal(ds.X[60000:], test_images)


def test_registry_checksums_match_real_files(mnist_dir):
    for entry in MNIST.files:
        data = (mnist_dir / f"{entry.stem}.gz").read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry.sha256_gz
        assert hashlib.sha256(gzip.decompress(data)).hexdigest() == entry.sha256_raw


def test_uncompressed_files_are_read_and_verified(mnist_dir, tmp_path):
    for entry in MNIST.files:
        (tmp_path / entry.stem).write_bytes(gzip.decompress((mnist_dir / f"{entry.stem}.gz").read_bytes()))
    ds = load_dataset("mnist", data_dir=tmp_path, verify=True)
    assert ds.X.shape == (70000, 784) and ds.verified


def test_checksum_mismatch_in_data_dir(mnist_dir, tmp_path):
    for entry in MNIST.files:
        shutil.copy(mnist_dir / f"{entry.stem}.gz", tmp_path)
    path = tmp_path / "t10k-labels-idx1-ubyte.gz"
    raw = bytearray(gzip.decompress(path.read_bytes()))
    raw[100] = (raw[100] + 1) % 10
    path.write_bytes(gzip.compress(bytes(raw)))
    with pytest.raises(DataError, match="checksum mismatch"):
        load_dataset("mnist", data_dir=tmp_path, verify=True)
    # Without --verify the (structurally valid) file is accepted: the check is opt-in.
    assert load_dataset("mnist", data_dir=tmp_path).X.shape == (70000, 784)


def test_count_mismatch_for_known_dataset(idx_dir):
    with pytest.raises(DataError, match="holds 60 items, mnist has 60000"):
        load_dataset("mnist", data_dir=idx_dir)


def test_generic_idx_dataset(idx_dir):
    ds = load_dataset("idx", data_dir=idx_dir)
    assert ds.X.shape == (80, 16) and ds.n_classes == int(ds.y.max()) + 1


def test_generic_idx_needs_data_dir():
    with pytest.raises(DataError, match="--data-dir"):
        load_dataset("idx")


def test_labels_and_images_must_agree(tmp_path):
    folder = make_idx_dir(tmp_path / "a", n_train=10)
    other = make_idx_dir(tmp_path / "b", n_train=12)
    shutil.copy(other / "train-labels-idx1-ubyte.gz", folder)
    with pytest.raises(DataError, match="10 images but 12 labels"):
        load_dataset("idx", data_dir=folder)


def test_images_in_label_slot(tmp_path):
    folder = make_idx_dir(tmp_path / "a")
    shutil.copy(folder / "train-images-idx3-ubyte.gz", folder / "train-labels-idx1-ubyte.gz")
    with pytest.raises(DataError, match="3 dimensions, expected 1"):
        load_dataset("idx", data_dir=folder)


def test_unknown_dataset():
    with pytest.raises(DataError, match="unknown dataset 'cifar'"):
        load_dataset("cifar")


def test_missing_data_dir(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_dataset("mnist", data_dir=tmp_path / "nope")


def test_default_falls_back_to_digits_offline(tmp_path):
    ds = load_dataset(None, data_dir=tmp_path)
    assert ds.name == "digits" and ds.X.shape == (1797, 64)
    assert "MNIST is not available" in ds.note and "\n" not in ds.note


def test_explicit_mnist_offline_is_an_error(tmp_path):
    with pytest.raises(DatasetUnavailable, match="--data-dir"):
        load_dataset("mnist", data_dir=tmp_path)


def test_environment_variable_data_dir(mnist_dir, monkeypatch):
    monkeypatch.setenv("MGPU_DASK_DATA_DIR", str(mnist_dir))
    ds = load_dataset(None)
    assert ds.name == "mnist" and ds.note is None


def test_synthetic_is_seeded_and_learnable():
    a = load_dataset("synthetic", seed=3)
    b = load_dataset("synthetic", seed=3)
    c = load_dataset("synthetic", seed=4)
    np.testing.assert_array_equal(a.X, b.X)
    assert not np.array_equal(a.X, c.X)
    assert a.X.shape == (70000, 784) and a.X.dtype == np.uint8
    means = np.stack([a.X[a.y == k][:200].mean(0) for k in range(10)])
    nearest = np.argmin(((a.X[:500, None, :] - means[None]) ** 2).sum(-1), axis=1)
    assert (nearest == a.y[:500]).mean() > 0.9
