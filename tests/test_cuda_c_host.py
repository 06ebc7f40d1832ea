"""Our CUDA C kernels (mgpu_dask/compare/cuda_c/*.cu) run on the host, for CI without a GPU.

``tests/cuda_c_host/cuda_host.h`` runs each block as threads whose warps
move in lockstep at every warp intrinsic, so the kernels' own code -- list
insertions by ballot and shuffle, warp reductions, block sums with atomics
-- is what these tests check, against exact references (the GPU tests in
test_gpu.py hold the kernels compiled by NVRTC to the same references).
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from mgpu_dask.compare.cupy import vote as reference_vote
from mgpu_dask.compare.cuda_c import kernels as cuda_c

HERE = Path(__file__).resolve().parent
KERNELS = HERE.parent / "mgpu_dask" / "compare" / "cuda_c"


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("g++ not found (apt-get install g++): the host build of our CUDA C kernels")
    out = tmp_path_factory.mktemp("cuda_c_host") / "kernels.so"
    subprocess.run([compiler, "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread",
                    f"-I{KERNELS}", "-o", str(out), str(HERE / "cuda_c_host" / "harness.cpp")],
                   check=True, capture_output=True, text=True)
    return ctypes.CDLL(str(out))


def _p(a: np.ndarray):
    assert a.flags.c_contiguous
    return ctypes.c_void_p(a.ctypes.data)


def _i(x: int):
    return ctypes.c_int(int(x))


def _ll(x: int):
    return ctypes.c_longlong(int(x))


def _u(x: int):
    return ctypes.c_uint(int(x))


def _warp_grid(rows: int) -> tuple:
    return _u(-(-rows // cuda_c.ROWS_PER_BLOCK)), _u(32 * cuda_c.ROWS_PER_BLOCK)


def _candidates(lib, Q, T, K, tile, products=np.float32):
    """cuda_c.candidates_by's loop: a product per tile of ``tile`` training rows (float32,
    or int32 as int8 products give), scan_topk (scan_topk_i32) each."""
    m, n = len(Q), len(T)
    norms = (T * T).sum(1).astype(np.float32)
    keys = np.full((m, K), np.inf)
    cols = np.full((m, K), cuda_c.NO_COLUMN, np.int32)
    scan = lib.launch_scan_topk_i32 if products == np.int32 else lib.launch_scan_topk
    for c0 in range(0, n, tile):
        G = np.ascontiguousarray(Q @ T[c0:c0 + tile].T).astype(products)
        scan(*_warp_grid(m), _p(G), _ll(G.shape[1]), _i(m), _i(G.shape[1]), _p(norms), _i(c0),
             _p(keys), _p(cols), _i(K))
    return keys, cols


def _refine(lib, Q, T, cols, k):
    m, K = cols.shape
    sq, rows = np.empty((m, k)), np.empty((m, k), np.int32)
    lib.launch_refine_rows(*_warp_grid(m), _p(Q), _ll(Q.shape[1]), _p(T), _ll(T.shape[1]),
                           _i(m), _i(Q.shape[1]), _p(cols), _i(K), _i(k), _p(sq), _p(rows))
    return sq, rows


def _exact(Q, T):
    return ((Q[:, None, :].astype(np.float64) - T[None].astype(np.float64)) ** 2).sum(-1)


def _small_integer_rows(seed):
    rng = np.random.default_rng(seed)
    T = rng.integers(0, 3, (600, 12)).astype(np.float32)  # many equal distances
    Q = rng.integers(0, 3, (45, 12)).astype(np.float32)
    Q[7] = T[123]  # an exact match
    return Q, T, rng.integers(0, 5, 600).astype(np.int32)


@pytest.mark.parametrize("products", [np.float32, np.int32])
@pytest.mark.parametrize("tile", [128, 600])
def test_scan_topk_keeps_each_rows_smallest_scores_across_tiles(lib, tile, products):
    Q, T, _ = _small_integer_rows(0)
    K = 3 + cuda_c.REFINE_MARGIN
    keys, cols = _candidates(lib, Q, T, K, tile, products)  # 128: five tiles, the last short
    score = (T * T).sum(1)[None, :] - 2.0 * (Q @ T.T)  # integers: exact in float32
    want = np.argsort(score, axis=1, kind="stable")[:, :K]  # ties: the smaller row first
    np.testing.assert_array_equal(cols, want)
    np.testing.assert_array_equal(keys, np.take_along_axis(score, want, 1))


def test_scan_topk_keys_are_exact_beyond_float32(lib):
    """Keys in float64, as our Numba scan: 8-bit rows of 784 features give keys above 2^24,
    which float32 would round (ties and order would then differ from the exact ones)."""
    rng = np.random.default_rng(3)
    T = rng.integers(-128, -100, (300, 784)).astype(np.float64)  # every row far from Q's
    Q = rng.integers(120, 128, (9, 784)).astype(np.float64)
    keys, cols = _candidates(lib, Q, T, 8, 100, np.int32)
    score = (T * T).sum(1)[None, :] - 2.0 * (Q @ T.T)
    assert score.min() > 2 ** 24  # the nearest keys too: float32 steps of 2 or more there
    want = np.argsort(score, axis=1, kind="stable")[:, :8]
    np.testing.assert_array_equal(cols, want)
    np.testing.assert_array_equal(keys, np.take_along_axis(score, want, 1))


def test_refine_and_vote_give_the_exact_neighbours_and_the_reference_vote(lib):
    Q, T, labels = _small_integer_rows(1)
    k = 5
    _, cols = _candidates(lib, Q, T, k + cuda_c.REFINE_MARGIN, 256)
    sq, rows = _refine(lib, Q, T, cols, k)
    exact = _exact(Q, T)
    want = np.argsort(exact, axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(rows, want)
    np.testing.assert_array_equal(sq, np.take_along_axis(exact, want, 1))
    for weights in ("distance", "uniform"):
        out = np.empty(len(Q), np.int32)
        lib.launch_vote_rows(_u(-(-len(Q) // cuda_c.THREADS)), _u(cuda_c.THREADS), _p(sq),
                             _p(rows), _i(len(Q)), _i(k), _p(labels), _i(5),
                             _i(weights == "uniform"), _p(out))
        np.testing.assert_array_equal(out, reference_vote(np.sqrt(sq), labels[rows], weights, 5))
        if weights == "distance":
            assert out[7] == labels[123]  # the exact match takes the vote


def test_softmax_xent_matches_float64(lib):
    from conftest import softmax_reference

    rng = np.random.default_rng(2)
    n, k = 300, 10  # 300 rows: a second block of 256 threads, most of them idle
    logits = rng.normal(0, 2, (n, k)).astype(np.float32)
    bias = rng.normal(0, 1, k).astype(np.float32)
    y = rng.integers(0, k, n).astype(np.int32)
    resid, sums = np.empty((n, k), np.float32), np.zeros(k + 1)
    assert lib.launch_softmax_xent(_u(-(-n // cuda_c.THREADS)), _u(cuda_c.THREADS), _p(logits),
                                   _p(bias), _p(y), _i(n), _i(k), _p(resid), _p(sums)) == 0
    want, rows = softmax_reference(logits.astype(np.float64) + bias, y)
    np.testing.assert_allclose(resid, want, atol=1e-6)
    np.testing.assert_allclose(sums[:k], want.sum(0), atol=1e-9)
    assert sums[k] == pytest.approx(rows.sum(), rel=1e-12)
