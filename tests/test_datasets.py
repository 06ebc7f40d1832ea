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


def test_files_read_ahead_load_the_same_data_once(tmp_path):
    """read_dataset_ahead starts reading the four files load_dataset will read; the load
    takes each one from there, once, and equals a load without it."""
    from mgpu_dask.data import idx
    from mgpu_dask.data.datasets import read_dataset_ahead

    folder = make_idx_dir(tmp_path / "idx")
    alone = load_dataset("idx", data_dir=folder)
    read_dataset_ahead("idx-deformed", data_dir=folder)  # a deformed set reads its base
    assert len(idx._AHEAD) == 4
    ahead = load_dataset("idx", data_dir=folder)
    assert not idx._AHEAD
    np.testing.assert_array_equal(ahead.X, alone.X)
    np.testing.assert_array_equal(ahead.y, alone.y)


def test_a_file_changed_after_the_read_ahead_is_read_again(tmp_path):
    from mgpu_dask.data import idx

    folder = make_idx_dir(tmp_path / "idx")
    path = folder / "t10k-labels-idx1-ubyte.gz"
    idx.read_ahead([path])
    before = idx.read_idx(path)  # consumed: the next read is direct
    idx.read_ahead([path])
    idx._AHEAD[str(path.resolve())][1].result()  # the thread has read the old content
    idx.write_idx(path, (before[::-1] + 1) % 10)
    assert len(idx.read_idx(path)) == len(before)
    np.testing.assert_array_equal(idx.read_idx(path), (before[::-1] + 1) % 10)
    idx._AHEAD.clear()


def test_a_bad_file_read_ahead_fails_at_the_load_with_its_error(tmp_path):
    from mgpu_dask.data.datasets import read_dataset_ahead

    folder = make_idx_dir(tmp_path / "idx")
    (folder / "train-images-idx3-ubyte.gz").write_bytes(b"\x1f\x8b not gzip")
    read_dataset_ahead("idx", data_dir=folder)
    with pytest.raises(DataError, match="not a valid gzip file"):
        load_dataset("idx", data_dir=folder)
    from mgpu_dask.data import idx

    idx._AHEAD.clear()  # the three files after the bad one were never asked for


def test_read_ahead_of_files_that_are_not_there_does_nothing(tmp_path):
    from mgpu_dask.data import idx
    from mgpu_dask.data.datasets import read_dataset_ahead

    read_dataset_ahead("mnist", data_dir=tmp_path)  # nothing there, nothing downloaded
    read_dataset_ahead("idx")  # no folder named
    read_dataset_ahead("nonsense", data_dir=tmp_path)
    assert not idx._AHEAD and not list(tmp_path.iterdir())
