"""The logistic-regression kernels a fit will use, compiled (or loaded from Numba's cache)
on a worker before the data arrives: a two-iteration fit of a few rows of the same kinds
(dtype, precision, classes, optimiser) as the run's, and, where the run's shards may hold
a million rows or more and those evaluate in one pass over the rows, one such evaluation
of the same rows.  Runs on the workers; imports no
scikit-learn."""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import numpy as np

from ..kernels.compiled import Steps, compilations, cupy_kernels, in_cache, track_cupy
from ..kernels.logreg import ShardObjective
from ..kernels.precision import Precision
from ..parallel import labels as labels_mod
from .blocks import predict_block
from .problem import Problem
from .solvers import fit_on_device

ROWS = 256
"""Rows of the warm-up fit: at least CuPy's threshold (128) for reducing with CUB's block
reduction, which it compiles apart from the small-array kernel, so the fit's reductions
over rows are the kinds the warm-up compiled."""


class Fit(NamedTuple):
    """What a run's fits are made of, as far as the kernels care."""

    gpu: bool
    dtype: str
    n_features: int
    precision: str
    n_classes: int
    optimizer: str
    scale: float | None
    label_dtype: str = "int32"
    large_shards: bool = False   # shards may hold a million rows or more (deformed MNIST)


def _products(fit: Fit) -> Precision:
    """The products the fit's evaluations will run in (what ShardObjective decides)."""
    asked = Precision.parse(fit.precision)
    if not fit.gpu:
        return Precision.FP32
    if asked is Precision.AUTO:
        asked = Precision.INT8
    import cupy

    cc = int(cupy.cuda.Device().compute_capability)
    return asked if cc >= 10 * asked.needs[0] + asked.needs[1] else Precision.FP32


def _kernels(fit: Fit) -> list[Any]:
    """The Numba kernels such a fit runs (CuPy's are tracked apart)."""
    if not fit.gpu:
        from ..kernels.logreg import cpu

        return [cpu.softmax_xent_rows]
    import cupy

    from ..kernels.logreg import cuda_bf16, cuda_int8, int8

    products = _products(fit)
    if products is Precision.INT8:
        used = [cuda_int8.transpose_bytes, cuda_int8.split_coef_i8, cuda_int8.sum_block_parts,
                cuda_int8.combine_i8]
        if not int8.runs_fused(fit.n_classes, cupy.cuda.Device()):  # else CuPy's kernel
            used.append(cuda_int8.softmax_xent_i8_for(fit.n_classes))
        if _one_pass(fit):  # shards of a million rows or more
            used.append(cuda_int8.combine_i8_once)
        if np.dtype(fit.dtype) != np.uint8 or fit.n_features % 4:
            used.append(cuda_int8.to_int8_levels)
    elif products is Precision.BF16:
        used = [cuda_bf16.to_levels, cuda_bf16.split_coef, cuda_bf16.softmax_xent_split,
                cuda_bf16.combine_split]
    else:
        used = _float_kernels(fit)
    if fit.optimizer != "host":
        from ..kernels.lbfgs import cuda as lbfgs
        from ..kernels.lbfgs import finish

        used += [lbfgs.products, lbfgs.direction, lbfgs.trial, lbfgs.set_trial, lbfgs.forget,
                 lbfgs.arm, finish.assemble, finish.apply]
    return used


def _one_pass(fit: Fit) -> bool:
    """Whether the fit has large shards and those of a million rows or more
    (``int8.ONE_PASS_FROM``) evaluate in one pass over the rows on this GPU
    (:mod:`mgpu_dask.kernels.logreg.onepass`)."""
    if not fit.gpu or not fit.large_shards or _products(fit) is not Precision.INT8:
        return False
    import cupy

    from ..kernels.logreg import int8

    d_pad = int8.padded_shape(ROWS, fit.n_features)[1]
    return int8.runs_one_pass(fit.n_classes, int8.ONE_PASS_FROM, d_pad, cupy.cuda.Device())


def cached(**fit: Any) -> bool:
    """Whether Numba's cache on this worker holds every kernel the fit runs (the fields of
    :class:`Fit` as keywords)."""
    return in_cache(_kernels(Fit(**fit)))


def seen(**fit: Any) -> bool:
    """Whether this worker's Numba cache holds the kernels every fit of this kind runs (the
    device L-BFGS's, else the evaluation's): False on a machine that never ran one (what
    ``parallel.first_use`` asks; :func:`cached` lists them all, the products' too)."""
    f = Fit(**fit)
    if not f.gpu:
        from ..kernels.logreg import cpu

        used = [cpu.softmax_xent_rows]
    elif f.optimizer != "host":
        from ..kernels.lbfgs import cuda as lbfgs
        from ..kernels.lbfgs import finish

        used = [lbfgs.products, finish.assemble]
    elif np.dtype(f.dtype) == np.uint8:
        from ..kernels.logreg import cuda_int8

        used = [cuda_int8.combine_i8]
    else:
        used = _float_kernels(f)
    return in_cache(used)


def _float_kernels(fit: Fit) -> list[Any]:
    """The Numba kernels of a float32 evaluation: the softmax between two cuBLAS
    products, and for large shards of few features and classes the one pass over the
    rows (:mod:`~mgpu_dask.kernels.logreg.cuda_float`)."""
    from ..kernels.logreg import cuda, cuda_float

    used = [cuda.softmax_kernel(fit.n_classes)]
    if fit.large_shards and cuda_float.fits(fit.n_features, fit.n_classes):
        used += [cuda_float.xent_grad_tiles, cuda_float.sum_block_parts]
    return used


def warm_up(**fields: Any) -> dict[str, Any]:
    """Fit ``ROWS`` rows as the run will (the fields of :class:`Fit` as keywords), two
    iterations, and predict them; returns how many kernels were compiled (not loaded from
    the cache), the seconds it took, the first CUDA call included, and each step's."""
    started, before = time.perf_counter(), compilations()
    steps = Steps()
    fit = Fit(**fields)
    rng = np.random.default_rng(0)
    if np.dtype(fit.dtype) == np.uint8:
        X = rng.integers(0, 256, (ROWS, fit.n_features)).astype(np.uint8)
    else:
        X = (rng.integers(0, 256, (ROWS, fit.n_features)) / 255.0).astype(fit.dtype)
    labels = (np.arange(ROWS) % fit.n_classes).astype(fit.label_dtype)
    k, d = fit.n_classes, fit.n_features
    coef, intercept = np.zeros((d, k)), np.zeros(k)
    y = labels.astype(np.int32)
    if fit.gpu:
        import cupy

        track_cupy()  # CuPy's compiles count too (kernels.compiled)
        X = cupy.asarray(X)
        steps.done("CuPy, the first CUDA call")
        y = labels_mod.codes(cupy.asarray(labels), labels_mod.present(cupy.asarray(labels)))
        steps.done("labels")
        if fit.optimizer != "host":
            problem = Problem(ROWS, d, k, 1.0 / ROWS, 2, 1e-12, "device",
                              Precision.parse(fit.precision), fit.scale)
            fit_on_device([(X, y)], problem)
            steps.done("fit on the device")
        if _one_pass(fit):  # the one-pass evaluation of large shards, on these rows
            from ..kernels.logreg import int8

            with int8.one_pass_on_any_rows():
                ShardObjective(X, y, k, fit.precision, fit.scale)(coef, intercept)
            steps.done("the one-pass evaluation")
    if not fit.gpu or fit.optimizer == "host":
        ShardObjective(X, y, k, fit.precision, fit.scale)(coef, intercept)
        steps.done("evaluation")
    predict_block(X, coef, intercept, np.unique(labels), host=True)
    steps.done("predict")
    return {"compiled": compilations() - before, "seconds": time.perf_counter() - started,
            "ended": time.time(), "steps": steps.seconds, **({"cupy kernels": cupy_kernels()} if fit.gpu else {})}
