"""Deformed training sets, generated on the workers that keep them (infinite-MNIST style).

``--dataset mnist-deformed --copies N`` trains on ``N`` copies of every
training image of the split: copy 0 is the image, the others are random
affine and elastic deformations of it (``mgpu_dask.kernels.deform``).  The
test part of the split stays untouched, so no test image, nor any
deformation of one, is trained on.  Each worker receives the source images
once (41 MB for MNIST) and makes its own block of rows on its GPU; no
generated row crosses the host.  Any ``NAME-deformed`` works for a data set
of square images (``fashion-mnist-deformed``, ``digits-deformed``, ``idx-deformed``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..exceptions import DataError
from ..kernels.deform.params import Deformation, parse_deformation
from ..parallel.workers import (
    detect_device,
    free_gpu_memory,
    scheduler_workers,
    worker_addresses,
)
from .registry import deformed_base

if TYPE_CHECKING:
    import dask.array as da

DEFAULT_COPIES = 155
"""52,500 MNIST training images x 155 = 8,137,500 rows, the size of MNIST8M."""

__all__ = ["DEFAULT_COPIES", "Deformation", "DeformedSpec", "deformed_base", "deformed_sources",
           "deformed_train", "parse_deformation"]


class DeformedSpec(NamedTuple):
    """What to generate: copies per source image, the seed and the deformation bounds."""

    copies: int = DEFAULT_COPIES
    seed: int = 0
    deformation: Deformation = Deformation()


def check_copies(copies: Any) -> int:
    if isinstance(copies, bool) or not isinstance(copies, (int, np.integer)) or copies < 1:
        raise DataError(f"--copies {copies} must be a positive integer (1 = the images "
                        f"themselves, {DEFAULT_COPIES} = MNIST8M's size)")
    return int(copies)


def deformed_sources(source_index: np.ndarray, copies: int) -> np.ndarray:
    """The data-set row each generated row was made from (row ``r``: source ``r % n_src``)."""
    return np.tile(np.asarray(source_index), copies)


def _generate(src: Any, row0: int, n_rows: int, seed: int, deformation: Deformation,
              device: str) -> Any:
    if device == "gpu":
        import cupy

        src = cupy.asarray(src)
    from ..kernels.deform.rows import (
        deform_rows,  # Numba: on the workers, not the client
    )
    from ..kernels.launch import finished

    return finished(deform_rows(src, row0, n_rows, seed, deformation))


def _free_bytes(client: Any, device: str) -> int:
    """Memory the workers can give the rows: free GPU memory, or the workers' memory limits."""
    if device == "gpu":
        return sum(free_gpu_memory(client))
    workers = scheduler_workers(client).values()
    import psutil

    return sum(w.get("memory_limit") or psutil.virtual_memory().total // max(1, len(workers))
               for w in workers)


def deformed_train(X_src: np.ndarray, y_src: np.ndarray, client: Any, spec: DeformedSpec, *,
                   device: str = "auto", timeout: float | None = None,
                   headroom: float = 0.5) -> tuple[da.Array, np.ndarray]:
    """``spec.copies`` copies of every source row, made on the workers (one block each).

    Parameters
    ----------
    X_src : numpy.ndarray of shape (n_src, side * side), uint8
        The source images (the training part of the split).
    y_src : numpy.ndarray of shape (n_src,)
    client : distributed.Client or None
        Each worker makes one contiguous block of rows; None builds a lazy
        array for the local scheduler.
    spec : DeformedSpec
    device : {"auto", "gpu", "cpu"}
        Where the rows live (``"auto"``: the GPUs when every worker has one).
    headroom : float, default 0.5
        Share of the workers' free memory the rows may take (the rest is for
        what trains on them); more is an error, before anything is generated.

    Returns
    -------
    (dask.array.Array, numpy.ndarray)
        The rows (uint8, persisted on the workers when there is a client) and their labels.
    """
    from ..parallel import placement  # Dask's arrays: not needed to check the options
    from .sharding import meta_for, row_bounds

    copies = check_copies(spec.copies)
    X_src = np.ascontiguousarray(X_src)
    if X_src.dtype != np.uint8:
        raise DataError(f"deformed data sets need uint8 images, got {X_src.dtype}")
    n_src, d = X_src.shape
    n_rows = n_src * copies
    if client is None:  # the local scheduler: blocks of a million rows, made here
        device, src, inputs, loose = "cpu", X_src, [], False
        bounds = row_bounds(n_rows, max(1, n_rows // 1_000_000), None)
        where: list[str | None] = [None] * len(bounds)
    else:  # one block per worker, made there from the source images it receives once
        where = list(worker_addresses(client))
        if device == "auto":
            device = detect_device(client)
        need, free = n_rows * d, _free_bytes(client, device)
        if need > headroom * free:
            raise DataError(
                f"{copies} copies of {n_src} images are {n_rows:,} rows x {d} = "
                f"{need / 1e9:.1f} GB (uint8); the {len(where)} workers can give them "
                f"{headroom * free / 1e9:.1f} GB ({headroom:.0%} of {free / 1e9:.1f} GB free "
                f"{'GPU' if device == 'gpu' else 'host'} memory) even sharded; use fewer "
                "--copies or more workers")
        source = client.scatter(X_src, broadcast=True, hash=False)
        src, inputs, loose = source.key, [source], not placement.ensure_recovery(client)
        bounds = row_bounds(n_rows, len(where), None)
    labels = np.tile(np.asarray(y_src, dtype=np.int32), copies)
    name = placement.fresh_name("deformed")
    tasks = [placement.Pinned((name, j, 0), (_generate, src, a, b - a, spec.seed,
                                             spec.deformation, device), w)
             for j, ((a, b), w) in enumerate(zip(bounds, where))]
    X = placement.pinned_array(name, tasks, chunks=(tuple(b - a for a, b in bounds), (d,)),
                               meta=meta_for(device, 2, np.uint8), inputs=inputs, loose=loose)
    if client is None:
        return X, labels
    from distributed import futures_of, wait

    X = client.persist(X, optimize_graph=False)
    wait(futures_of(X), timeout=timeout)
    return X, labels  # the workers' copies of the source images go with the last reference


def deformed_spec(dataset: str | None, copies: int | None,
                  deformation: str | None, seed: int) -> DeformedSpec | None:
    """What to generate for a ``NAME-deformed`` data set; errors for options without one."""
    if deformed_base(dataset) is None:
        if copies is not None or deformation:
            raise DataError("--copies and --deform apply to deformed data sets "
                            "(--dataset mnist-deformed)")
        return None
    try:
        bounds = parse_deformation(deformation)
    except ValueError as exc:
        raise DataError(f"--deform: {exc}") from None
    return DeformedSpec(check_copies(DEFAULT_COPIES if copies is None else copies), seed, bounds)
