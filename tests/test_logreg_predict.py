"""The predict kernel (``kernels.logreg.predict``): the most probable class of each row
in one launch, under Numba's CUDA simulator here (the GPU tests run it on CuPy rows)."""

from __future__ import annotations

import numpy as np
import pytest
from numba import config

from mgpu_dask.kernels.launch import launch
from mgpu_dask.kernels.logreg import predict

simulated = pytest.mark.skipif(not config.ENABLE_CUDASIM,
                               reason="CUDA kernels run here only under the simulator")


def _indices(X: np.ndarray, coef: np.ndarray, intercept: np.ndarray) -> np.ndarray:
    out = np.full(X.shape[0], -1, dtype=np.int32)
    launch(predict.argmax_rows, -(-X.shape[0] // predict.ROWS_PER_BLOCK),
           predict.ROWS_PER_BLOCK * predict.LANES, X, coef.astype(np.float32),
           intercept.astype(np.float32), out)
    return out


@simulated
@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
@pytest.mark.parametrize("n, d, k", [(7, 40, 3), (9, 33, 10), (5, 70, predict.MAX_CLASSES)])
def test_the_kernel_takes_the_largest_logit_of_every_row(dtype, n, d, k):
    """Rows not a multiple of the block's, features not of the warp's, up to MAX_CLASSES
    classes: every row's index is NumPy's argmax of its float64 logits."""
    rng = np.random.default_rng(n * k)
    X = rng.integers(0, 256, (n, d)).astype(dtype)
    X[0] = 0  # an all-zero row: the intercept decides
    if dtype == np.float32:
        X /= np.float32(255)
    coef = rng.standard_normal((d, k)).astype(np.float32)
    intercept = rng.standard_normal(k).astype(np.float32)
    want = (X.astype(np.float64) @ coef.astype(np.float64) + intercept).argmax(axis=1)
    np.testing.assert_array_equal(_indices(X, coef, intercept), want)
    assert want[0] == intercept.argmax()


@simulated
def test_a_tie_goes_to_the_first_class():
    X = np.ones((3, 8), np.uint8)
    coef = np.zeros((8, 4), np.float32)
    coef[:, 1] = coef[:, 3] = 1.0  # classes 1 and 3 tie on every row
    np.testing.assert_array_equal(_indices(X, coef, np.zeros(4)), [1, 1, 1])


def test_only_gpu_rows_of_few_classes_take_the_kernel():
    X = np.zeros((4, 6), np.uint8)
    assert not predict.usable(X, np.zeros((6, 3)))  # NumPy rows: the CPU path
    assert predict.MAX_CLASSES >= 10


@pytest.mark.gpu
@pytest.mark.parametrize("k", [10, predict.MAX_CLASSES + 8])  # the kernel; the CuPy path
def test_predict_block_on_gpu_rows_is_the_float64_argmax(k):
    """``predict_block`` on CuPy uint8 rows (17,501 of 784 pixels, as a test block): the
    classes of the float64 logits' argmax, on the host and on the GPU, whether the kernel
    takes them or (too many classes) CuPy's product does."""
    import cupy

    from mgpu_dask.logreg.blocks import predict_block

    rng = np.random.default_rng(k)
    X = rng.integers(0, 256, (17501, 784)).astype(np.uint8)
    X[:, :100] = 0
    coef = (rng.standard_normal((784, k)) / 255).astype(np.float32).astype(np.float64)
    intercept = rng.standard_normal(k).astype(np.float32).astype(np.float64)
    classes = np.arange(k) * 3 + 1
    logits = X.astype(np.float64) @ coef + intercept
    want = classes[logits.argmax(axis=1)]
    top2 = np.sort(logits, axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > 1e-4 * np.abs(top2[:, 1]).max()  # no float32 near-ties
    assert predict.usable(cupy.asarray(X), coef) == (k <= predict.MAX_CLASSES)
    host = predict_block(cupy.asarray(X), coef, intercept, classes, host=True)
    on_gpu = predict_block(cupy.asarray(X), coef, intercept, classes)
    assert isinstance(host, np.ndarray) and isinstance(on_gpu, cupy.ndarray)
    np.testing.assert_array_equal(host[clear], want[clear])
    np.testing.assert_array_equal(on_gpu.get(), host)
    assert clear.mean() > 0.99
