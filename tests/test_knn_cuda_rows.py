"""The per-row kernels of a float search (``kernels.knn.cuda_rows``) against the NumPy code
they stand in for on a GPU: the queries' float16 operand, and the packed candidates.
They run in Numba's CUDA simulator without a GPU (NumPy arrays, as the kernels take
them there) and on the GPU with one."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from mgpu_dask.kernels.knn import cuda_rows, floats, search
from mgpu_dask.kernels.knn.distances import INT_MAX
from mgpu_dask.kernels.precision import Precision


@cuda.jit
def _bits_of(x, bits, values):
    i = cuda.grid(1)
    if i < x.size:
        b, v = cuda_rows.half_bits(x[i])
        bits[i] = b
        values[i] = v


def test_half_bits_round_as_float16_does_once_from_float64():
    rng = np.random.default_rng()
    x = rng.standard_normal(300) * 10.0 ** rng.integers(-9, 5, 300)
    ties = [2 ** -24, 2 ** -25, 3 * 2 ** -25, 5 * 2 ** -25, 2 ** -14, 2048.5, 2049.0, 2051.0,
            1 + 2 ** -11, 1 + 3 * 2 ** -11, 1 + 2 ** -11 + 2 ** -40, 65504.0, 32768.0, 0.0]
    x = np.concatenate([x[np.abs(x) <= 65504], ties, [-t for t in ties]])
    bits = np.zeros(x.size, np.int64)
    values = np.zeros(x.size, np.float64)
    _bits_of[-(-x.size // 64), 64](x, bits, values)
    want = x.astype(np.float16)
    nonzero = x != 0  # the sign of a zero is not kept (-0.0 gives +0.0's bits)
    np.testing.assert_array_equal(bits.astype(np.uint16)[nonzero], want.view(np.uint16)[nonzero])
    np.testing.assert_array_equal(values, want.astype(np.float64))


@pytest.mark.parametrize("metric", floats.METRICS)
@pytest.mark.parametrize("split", [False, True])
def test_the_query_operand_in_one_launch_equals_the_array_code(metric, split):
    rng = np.random.default_rng()
    d = int(rng.integers(1, 70))
    T = floats.metric_rows(np, (rng.standard_normal((300, d)) * 3 + 1).astype(np.float32), metric)
    Q = (rng.standard_normal((25, d)) * rng.lognormal(0, 2, d) + 1).astype(np.float32)
    Q[3] *= 1e6  # past float16's range: searched in float64
    Q = floats.metric_rows(np, Q, metric)
    frame = floats.frame_of(np, T, Precision.FP16, split)
    width = 3 * frame.part if split else d
    want = np.zeros((len(Q), width), np.float32)
    rounded = floats.float_operand(np, Q, Precision.FP16, frame, query=True, metric=metric,
                                   out=want, gpu=False)
    scaled = floats.sq_norms(np, Q, frame, metric, query=True)
    out = np.zeros((len(Q) + 7, width), np.float16)  # a loop's buffer: more rows than asked
    wide, error, offsets, q_norm = floats.half_queries(np, Q, frame, metric, out)
    np.testing.assert_array_equal(out[:len(Q)].astype(np.float32), want)
    assert not out[len(Q):].any()
    np.testing.assert_array_equal(wide, rounded.largest > floats.QUERY_MAX)
    assert wide[3] or metric == "cosine"
    np.testing.assert_allclose(error, rounded.error, rtol=1e-12)
    np.testing.assert_allclose(offsets, floats.offsets(np, Q, frame, metric, scaled), rtol=1e-12,
                               atol=1e-300)
    np.testing.assert_allclose(q_norm, np.sqrt(scaled) / frame.scale, rtol=1e-12)


@pytest.mark.parametrize("metric", floats.METRICS)
def test_packed_candidates_in_one_launch_equal_the_array_code(metric):
    rng = np.random.default_rng()
    m, k, n = 30, 7, 500
    sq = rng.standard_normal((m, k)) * 4
    cols = rng.integers(0, n, (m, k)).astype(np.int32)
    cols[rng.random((m, k)) < 0.2] = INT_MAX  # no neighbour there
    labels = rng.integers(0, 9, n).astype(np.int32)
    index = rng.integers(0, 10 ** 9, n).astype(np.int64)
    want = search._pack(np, floats.finish(np, sq, metric), cols, labels, index)
    out = np.full((m, k, 3), np.nan)
    cuda_rows.pack_rows[-(-m * k // 64), 64](sq, cols, labels, index,
                                              cuda_rows.METRIC_CODES[metric], out)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("dtype, d, want", [
    ("float32", 32, {"pack_rows", "half_query_rows", "refine_rows_short"}),
    ("float32", 784, {"pack_rows", "half_query_rows", "refine_rows"}),
    ("uint8", 784, {"pack_rows"})])
def test_a_gpu_warm_up_counts_the_per_row_kernels(monkeypatch, dtype, d, want):
    """What a worker's check of Numba's cache asks for (``knn.warmup.cached``): the kernels
    above wherever the search runs them, the short re-rank for rows of few features."""
    from mgpu_dask.knn import warmup

    monkeypatch.setattr(warmup, "gpu_capability", lambda: (9, 0))
    search = warmup.Search(gpu=True, dtype=dtype, n_features=d, precision="auto",
                           method="gemm", k=3, margin=8, weights="distance", merge=False)
    names = {kernel.__name__ for kernel in warmup._kernels(search)}
    assert want <= names
    assert not ({"pack_rows", "half_query_rows", "refine_rows_short", "refine_rows"} - want) & names


def test_the_short_re_rank_equals_the_cpu_twin():
    """Few features: each thread sums one candidate in feature order, as the CPU twin does
    (the same values, to the last bits a GPU's fused multiply-adds may change)."""
    from mgpu_dask.kernels.knn import cpu

    rng = np.random.default_rng()
    m, n, d, K, k = 12, 200, 19, 18, 5
    Q = rng.standard_normal((m, d)).astype(np.float32)
    T = rng.standard_normal((n, d)).astype(np.float32)
    cand = np.stack([rng.permutation(n)[:K] for _ in range(m)]).astype(np.int32)
    cand[0, 3] = INT_MAX
    cand[1, :] = cand[1, 0]  # one column many times: ties to itself
    for inner in (0, 1):
        got = np.empty((m, k)), np.empty((m, k), np.int32)
        want = np.empty((m, k)), np.empty((m, k), np.int32)
        cuda_rows.refine_rows_short[m, cuda_rows.REFINE_THREADS](Q, T, cand, k, inner, *got)
        cpu.refine_rows(Q, T, cand, k, inner, *want)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-13)
        np.testing.assert_array_equal(got[1], want[1])  # no near-ties in random rows


def test_the_short_re_rank_places_few_candidates_and_drops_nan_as_the_cpu_twin_does():
    """Fewer candidates than k (the rest "no neighbour"), values that tie to the last bit
    (ordered by column), and a row whose values are NaN (no candidate kept)."""
    from mgpu_dask.kernels.knn import cpu

    rng = np.random.default_rng(7)
    m, n, d, k = 6, 40, 5, 5
    Q = rng.standard_normal((m, d)).astype(np.float32)
    T = rng.standard_normal((n, d)).astype(np.float32)
    T[10] = T[3]  # two columns at the same distance from every row
    Q[2, 1] = np.nan
    cand = np.array([[10, 3, 7], [3, 10, INT_MAX]] * 3, dtype=np.int32)
    got = np.full((m, k), -1.0), np.full((m, k), -1, np.int32)
    want = np.empty((m, k)), np.empty((m, k), np.int32)
    cuda_rows.refine_rows_short[m, cuda_rows.REFINE_THREADS](Q, T, cand, k, 0, *got)
    cpu.refine_rows(Q, T, cand, k, 0, *want)
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-13)
    for row in (0, 1, 3, 4, 5):  # the tie: column 3 right before 10, whatever their order
        where = list(got[1][row])
        assert where.index(10) == where.index(3) + 1
        assert list(got[1][row, 3:]) == [INT_MAX, INT_MAX] and np.isinf(got[0][row, 3:]).all()
    assert (got[1][2] == INT_MAX).all()


@pytest.mark.parametrize("d, want", [(32, "refine_rows_short"), (128, "refine_rows_short"),
                                     (129, "refine_rows")])
def test_a_machine_has_seen_float_searches_by_the_re_rank_they_run(monkeypatch, d, want):
    """``knn.warmup.seen`` (whether a first run will compile, which a CompileWarning says)
    asks Numba's cache for the re-rank kernel the search runs, not one it never uses."""
    from mgpu_dask.knn import warmup

    asked = []
    monkeypatch.setattr(warmup, "in_cache", lambda kernels: asked.extend(kernels) or True)
    assert warmup.seen(gpu=True, dtype="float32", n_features=d, precision="auto",
                       method="gemm", k=3, margin=8, weights="distance", merge=False)
    assert [kernel.__name__ for kernel in asked] == [want]
