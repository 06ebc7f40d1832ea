"""Loading a data set by name: MNIST-style IDX files, digits, synthetic.

IDX files are looked for, in order, in ``data_dir`` (``--data-dir``, or
``MGPU_DASK_DATA_DIR``), in the cache directory, and are otherwise downloaded
into the cache with their SHA-256 checked.  The train and test files are
returned combined (the project's protocol splits them again, seeded).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from .. import config
from ..exceptions import DataError, MgpuDaskError
from .download import DownloadError, download, sha256_of
from .idx import read_ahead, read_idx
from .registry import DATASETS, IDX_SPECS, IMAGE_SETS, IdxFile, IdxSpec, deformed_base


@dataclass(frozen=True)
class Dataset:
    """A whole labelled data set, train and test files combined.

    Attributes
    ----------
    name : str
        Registry name (``"mnist"``, ``"digits"``, ...).
    X : numpy.ndarray of shape (n_samples, n_features)
        Features as stored (uint8 pixels for image sets).
    y : numpy.ndarray of shape (n_samples,)
        Integer labels in ``[0, n_classes)``.
    n_classes : int
        Number of classes.
    source : str
        Where the data came from (a folder, ``"downloaded to ..."``, ``"bundled"``, ``"generated"``).
    note : str or None
        One line for the user when something other than what was asked for was used.
    """

    name: str
    X: np.ndarray
    y: np.ndarray
    n_classes: int
    source: str
    note: str | None = None
    verified: bool = False


class DatasetUnavailable(DataError):
    """The files are nowhere to be found and could not be downloaded."""


def _find(folder: Path, stem: str) -> Path | None:
    for name in (stem + ".gz", stem, stem.replace("-idx", ".idx")):
        if (folder / name).is_file():
            return folder / name
    return None


def _verify(path: Path, entry: IdxFile) -> None:
    want = entry.sha256_gz if path.suffix == ".gz" else entry.sha256_raw
    if want is None:
        return
    got = sha256_of(path)
    if got != want:
        raise DataError(
            f"{path}: checksum mismatch (SHA-256 {got[:16]}…, expected {want[:16]}…); "
            "delete it and fetch it again with `python -m mgpu_dask.run data --verify`"
        )


def _locate(spec: IdxSpec, data_dir: Path | None, allow_download: bool,
            verify: bool) -> tuple[list[Path], str, bool]:
    """Paths of the four files, where they came from, and whether they were checksummed."""
    searched = []
    for folder, label in ((data_dir, "data dir"), (config.cache_dir() / spec.name, "cache")):
        if folder is None:
            continue
        searched.append(str(folder))
        found = [_find(folder, f.stem) for f in spec.files]
        if all(found):
            paths = [p for p in found if p is not None]
            if verify:
                for path, entry in zip(paths, spec.files):
                    _verify(path, entry)
            return paths, f"{label} {folder}", verify
    mirrors = list(config.get(f"data.mirrors.{spec.name}", []) or [])
    where = ", ".join(searched) or "nowhere (no data dir set)"
    if not mirrors or not allow_download or not config.get("data.download", True):
        raise DatasetUnavailable(
            f"{spec.name} files not found in {where} and downloading is off; "
            "pass --data-dir DIR holding the four IDX files (or set MGPU_DASK_DATA_DIR)"
        )
    target = config.cache_dir() / spec.name
    paths = []
    try:
        for entry in spec.files:
            existing = _find(target, entry.stem)
            paths.append(existing or download(entry.stem + ".gz", entry.sha256_gz, mirrors,
                                              target, config.seconds("data.download-timeout")))
    except DownloadError as exc:
        raise DatasetUnavailable(
            f"{spec.name} not found in {where} and {exc}; pass --data-dir DIR holding the "
            "four IDX files (or set MGPU_DASK_DATA_DIR), or run `python -m mgpu_dask.run data "
            f"--dataset {spec.name}` where the internet is reachable"
        ) from None
    return paths, f"downloaded to {target}", True


def _load_idx(spec: IdxSpec, data_dir: Path | None, allow_download: bool,
              verify: bool) -> Dataset:
    if spec.name == "idx" and data_dir is None:
        raise DataError("dataset 'idx' reads your own IDX files: pass --data-dir DIR")
    paths, source, verified = _locate(spec, data_dir, allow_download and spec.name != "idx",
                                      verify)
    arrays = [read_idx(p, ndim=3 if i % 2 == 0 else 1) for i, p in enumerate(paths)]
    for path, entry, array in zip(paths, spec.files, arrays):
        if entry.count is not None and array.shape[0] != entry.count:
            raise DataError(f"{path}: holds {array.shape[0]} items, {spec.name} has {entry.count}")
    (xtr, ytr, xte, yte) = arrays
    for images, labels, kind in ((xtr, ytr, "train"), (xte, yte, "test")):
        if images.shape[0] != labels.shape[0]:
            raise DataError(f"{spec.name} {kind}: {images.shape[0]} images but "
                            f"{labels.shape[0]} labels; the files do not belong together")
    if xtr.shape[1:] != xte.shape[1:]:
        raise DataError(f"{spec.name}: train images are {xtr.shape[1:]}, test images "
                        f"{xte.shape[1:]}; the files do not belong together")
    if spec.image_shape is not None and xtr.shape[1:] != spec.image_shape:
        raise DataError(f"{spec.name}: images are {xtr.shape[1:]}, expected {spec.image_shape}")
    X = np.concatenate([xtr.reshape(len(xtr), -1), xte.reshape(len(xte), -1)])
    y = np.concatenate([ytr, yte]).astype(np.int32)
    if y.min() < 0:
        raise DataError(f"{spec.name}: negative label {y.min()} in the label files")
    n_classes = spec.n_classes or int(y.max()) + 1
    if y.max() >= n_classes:
        raise DataError(f"{spec.name}: label {y.max()} is outside the {n_classes} classes")
    return Dataset(spec.name, X, y, n_classes, source, verified=verified)


def make_synthetic(n_samples: int = 70000, n_features: int = 784, n_classes: int = 10,
                   seed: int = 0) -> Dataset:
    """A seeded, learnable MNIST-shaped data set: noisy copies of class prototypes."""
    rng = np.random.default_rng(seed)
    prototypes = rng.integers(0, 256, size=(n_classes, n_features), dtype=np.int16)
    y = rng.integers(0, n_classes, size=n_samples).astype(np.int32)
    noise = rng.integers(-96, 97, size=(n_samples, n_features), dtype=np.int16)
    X = np.clip(prototypes[y] + noise, 0, 255).astype(np.uint8)
    return Dataset("synthetic", X, y, n_classes, f"generated (seed {seed})", verified=True)


def load_digits_dataset() -> Dataset:
    """scikit-learn's bundled 8x8 digits (1797 samples, values 0..16), always offline."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return Dataset("digits", bunch.data.astype(np.uint8), bunch.target.astype(np.int32), 10,
                   "bundled with scikit-learn", verified=True)


def load_dataset(name: str | None = None, *, data_dir: str | Path | None = None,
                 download: bool = True, verify: bool = False, seed: int = 0) -> Dataset:
    """Load a data set by name, train and test combined.

    Parameters
    ----------
    name : {"mnist", "fashion-mnist", "digits", "synthetic", "idx", "NAME-deformed"} or None
        ``None`` means MNIST, falling back to ``digits`` (with a ``note``) when
        MNIST cannot be found or downloaded.  Naming ``"mnist"`` explicitly
        makes its absence an error instead.  ``"mnist-deformed"`` (any
        ``NAME-deformed`` of square images) loads ``NAME``; its training part
        is replaced by deformed copies once a cluster runs
        (:func:`mgpu_dask.data.deformed.deformed_train`).
    data_dir : str or path-like, optional
        Folder holding the IDX files; defaults to ``MGPU_DASK_DATA_DIR`` or the
        ``mgpu-dask.data.data-dir`` config key.
    download : bool, default True
        Whether missing files may be downloaded into the cache.
    verify : bool, default False
        Check SHA-256s of files found locally too (downloads are always checked).
    seed : int, default 0
        Seed for the ``synthetic`` data set.

    Returns
    -------
    Dataset

    Examples
    --------
    >>> ds = load_dataset("digits")
    >>> ds.X.shape, ds.n_classes
    ((1797, 64), 10)
    """
    folder = Path(data_dir).expanduser() if data_dir is not None else config.data_dir()
    if folder is not None and not folder.is_dir():
        raise DataError(f"data dir {folder} does not exist or is not a folder")
    if name is None:
        try:
            return _load_idx(IDX_SPECS["mnist"], folder, download, verify)
        except DatasetUnavailable as exc:
            ds = load_digits_dataset()
            note = (f"MNIST is not available ({str(exc).split(';')[0]}); using scikit-learn's "
                    "digits instead (--dataset mnist --data-dir DIR to insist on MNIST)")
            return Dataset(ds.name, ds.X, ds.y, ds.n_classes, ds.source, note, ds.verified)
    base = deformed_base(name)
    if base is not None:
        if base not in DATASETS or base == "synthetic":
            raise DataError(f"unknown dataset {name!r}; deformed sets are made of image data "
                            f"sets: {', '.join(d + '-deformed' for d in IMAGE_SETS)}")
        ds = load_dataset(base, data_dir=data_dir, download=download, verify=verify, seed=seed)
        return replace(ds, name=name)
    if name == "digits":
        return load_digits_dataset()
    if name == "synthetic":
        return make_synthetic(seed=seed)
    if name in IDX_SPECS:
        return _load_idx(IDX_SPECS[name], folder, download, verify)
    raise DataError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)} "
                    f"(or NAME-deformed of {', '.join(IMAGE_SETS)})")


def read_dataset_ahead(name: str | None = None, *,
                       data_dir: str | Path | None = None) -> None:
    """Start reading the IDX files that :func:`load_dataset` with these arguments would
    read, where they are on disk already, on threads of their own
    (:func:`~.idx.read_ahead`), so that a caller's imports overlap the decompression.

    Nothing is downloaded or checked here, and nothing is raised: the load does that.
    """
    if name is not None:
        name = deformed_base(name) or name
    spec = IDX_SPECS.get("mnist" if name is None else name)
    if spec is None or (spec.name == "idx" and data_dir is None):
        return
    try:
        folder = Path(data_dir).expanduser() if data_dir is not None else config.data_dir()
        paths, _, _ = _locate(spec, folder, allow_download=False, verify=False)
    except (MgpuDaskError, OSError):
        return
    read_ahead(paths)
