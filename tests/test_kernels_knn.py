"""KNN kernels against a float64 NumPy reference, on fresh random data each run.

The CPU kernels run at moderate sizes; the CUDA kernels run on tiny inputs in
Numba's CUDA simulator (tests/conftest.py enables it where no GPU exists).  On
a CPU the tensor-core precisions are emulated (operands rounded as the GPU
rounds them), so the exactness argument and the certified re-rank are
checked here; the GPU tests check the real tensor cores.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import config

from mgpu_dask.kernels import knn as K
from mgpu_dask.kernels.knn import precision as precisions
from mgpu_dask.kernels.knn.operands import prepare_train

TARGETS = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not config.ENABLE_CUDASIM, reason="CUDA kernels run here only under the simulator"))]
PRECISIONS = ["int8", "bf16", "tf32", "fp32"]


def _pixels(m, n, d, rng, levels=256):
    return (rng.integers(0, levels, (m, d)).astype(np.uint8),
            rng.integers(0, levels, (n, d)).astype(np.uint8))


def _exact(Q, T):
    return ((Q[:, None, :].astype(np.float64) - T[None].astype(np.float64)) ** 2).sum(-1)


def _size(target):
    return (5, 37, 16) if target == "cuda" else (120, 700, 48)


def _tile(target, n):
    """A tile budget that makes several tiles in both directions."""
    return 4 * 16 * 16 if target == "cuda" else 4 * 32 * max(16, n // 5)


def _check(cand, ref, labels, k, offset=0):
    """Candidates against squared distances ``ref``: the euclidean distance comes back."""
    order = np.argsort(ref, axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(cand[..., 1], order + offset)
    np.testing.assert_allclose(cand[..., 0], np.sqrt(np.take_along_axis(ref, order, 1)),
                               rtol=1e-12)
    np.testing.assert_array_equal(cand[..., 2], labels[order])


@pytest.mark.parametrize("target", TARGETS)
def test_sqdist_is_exact_for_integer_data(target):
    m, n, d = _size(target)
    Q, T = _pixels(m, n, d, np.random.default_rng())
    Q, T = Q.astype(np.float32), T.astype(np.float32)
    np.testing.assert_array_equal(K.sqdist(Q, T, target=target), _exact(Q, T))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("K_", [3, 4, 5, 20])  # each list length: short, middle, long
def test_running_topk_over_tiles_matches_stable_argsort(target, K_):
    rng = np.random.default_rng()
    m, n, _ = _size(target)
    keys = rng.integers(0, 20, (m, n)).astype(np.float32)  # many ties: smaller column must win
    values, cols = K.smallest(keys, K_, tile_cols=7, target=target)
    order = np.argsort(keys, axis=1, kind="stable")[:, :K_]
    np.testing.assert_array_equal(cols, order)
    np.testing.assert_array_equal(values, np.take_along_axis(keys, order, 1))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("method", ["gemm", "direct"])
def test_pixels_give_exact_neighbours_in_every_precision(target, precision, method):
    rng = np.random.default_rng()
    m, n, d = _size(target)
    Q, T = _pixels(m, n, d, rng, levels=rng.choice([8, 256]))  # few levels: many ties
    labels = rng.integers(0, 10, n).astype(np.int32)
    train = prepare_train(T, precision, True, 128, method)
    assert (train.rows is None) == (method == "gemm")  # exact keys: nothing to re-rank
    cand = K.local_candidates(Q, train, labels, np.arange(n, dtype=np.int64) + 1000, 3,
                              tile_bytes=_tile(target, n), target=target)
    _check(cand, _exact(Q, T), labels, 3, offset=1000)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("precision", ["bf16", "tf32", "fp32"])
def test_float_data_are_reranked_and_certified(target, precision, monkeypatch):
    from mgpu_dask.kernels.knn import search

    # one tier only: with no margin, rows then cannot be certified and go to float64
    monkeypatch.setattr(search, "tiers", lambda train: [False])
    rng = np.random.default_rng()
    m, n, d = _size(target)
    Q = rng.standard_normal((m, d)).astype(np.float32)
    T = rng.standard_normal((n, d)).astype(np.float32)
    labels = rng.integers(0, 10, n).astype(np.int32)
    train = prepare_train(T, precision, False, 0)
    for margin in (8, 0):  # no margin: no row can be certified, every row is recomputed
        stats: dict = {}
        cand = K.local_candidates(Q, train, labels, np.arange(n, dtype=np.int64), 3,
                                  margin=margin, tile_bytes=_tile(target, n), target=target,
                                  stats=stats)
        _check(cand, _exact(Q, T), labels, 3)
        if margin == 0:
            assert stats["rows_recomputed"] == m


@pytest.mark.parametrize("precision", ["bf16", "fp16", "tf32", "fp32"])
def test_error_bound_holds_for_emulated_products(precision):
    """|key~ - key| <= e(q) on data built to be hard (wide dynamic range, long rows)."""
    rng = np.random.default_rng()
    d = 256
    Q = (rng.standard_normal((200, d)) * rng.lognormal(0, 2, d)).astype(np.float32)
    T = (rng.standard_normal((300, d)) * rng.lognormal(0, 2, d)).astype(np.float32)
    scale = 2.0 ** -6 if precision == "fp16" else 1.0  # float16's range
    Qr, Tr = (precisions.round_operand((a * scale).astype(np.float32), precision) for a in (Q, T))
    norms = (T.astype(np.float64) ** 2).sum(1).astype(np.float32)
    approx = norms.astype(np.float64)[None] - 2.0 * (Qr @ Tr.T).astype(np.float64) / scale ** 2
    exact = (T.astype(np.float64) ** 2).sum(1)[None] - 2.0 * (Q.astype(np.float64) @ T.T.astype(np.float64))
    bound = precisions.error_bound(precision, d, np.sqrt((Q.astype(np.float64) ** 2).sum(1)),
                                   float(np.sqrt(norms.max())), scale=scale)
    assert (np.abs(approx - exact) <= bound[:, None]).all()
    assert (np.abs(approx - exact) > bound[:, None] / 1e4).any() or precision == "fp32"


def test_error_bound_holds_for_the_three_part_float16_product():
    """hi = fp16(x), lo = fp16(x - hi): qh.th + qh.tl + ql.th within the split bound, which is
    many times tighter than the plain float16 one (float32's accumulation then bounds it)."""
    rng = np.random.default_rng()
    d = 96
    Q = (rng.standard_normal((150, d)) * rng.lognormal(0, 1, d)).astype(np.float32)
    T = (rng.standard_normal((250, d)) * rng.lognormal(0, 1, d)).astype(np.float32)
    scale = 2.0 ** 4

    def parts(a):
        v = a.astype(np.float64) * scale
        hi = v.astype(np.float16).astype(np.float64)
        return hi, (v - hi).astype(np.float16).astype(np.float64)

    (qh, ql), (th, tl) = parts(Q), parts(T)
    products = (qh @ th.T + qh @ tl.T + ql @ th.T) / scale ** 2
    exact = Q.astype(np.float64) @ T.T.astype(np.float64)
    q_norm = np.sqrt((Q.astype(np.float64) ** 2).sum(1))
    t_max = float(np.sqrt((T.astype(np.float64) ** 2).sum(1).max()))
    split = precisions.error_bound("fp16", d, q_norm, t_max, scale=scale, split=True)
    plain = precisions.error_bound("fp16", d, q_norm, t_max, scale=scale)
    assert (2 * np.abs(products - exact) <= split[:, None]).all()
    assert (split < plain / 10).all()


def _bound_as_written(precision, d, q, t, scale=1.0, split=False, q_err=None, t_err=None):
    """The bound term by term, as precision.error_bound's comments write it."""
    P = precisions
    u = P.OPERAND_ROUNDOFF[P.Precision(precision)]
    a = P.UNDERFLOW.get(P.Precision(precision), 0.0) / scale
    r = d ** 0.5
    terms = 3 * d if split else d
    g = terms * P.ACCUMULATION_ROUNDOFF / (1.0 - terms * P.ACCUMULATION_ROUNDOFF)
    if split:
        rounding = 3.1 * u * u * q * t + 2.0 * a * r * (q + t) + 8.0 * d * a * a
        summed = 1.1 * g * (q + 3 * a * r) * (t + 3 * a * r)
    elif q_err is not None:
        rounding = q_err * t + q * t_err + q_err * t_err
        summed = g * (q + q_err) * (t + t_err)
    else:
        rounding = (2.0 * u + u * u) * q * t + (1.0 + u) * a * r * (q + t) + d * a * a
        summed = g * (q * (1 + u) + a * r) * (t * (1 + u) + a * r)
    keys = 2.0 ** -23 * (t * t + 2.0 * q * t)
    return P.SAFETY * (2.0 * (rounding + summed) + 2.0 ** -24 * t * t + keys)


@pytest.mark.parametrize("precision", ["fp16", "bf16", "tf32"])
def test_the_bound_in_few_operations_is_the_bound_as_written(precision):
    """error_bound makes its coefficients from scalars first (two to four operations on an
    array of rows): the same bound, term by term, to the last bits or so."""
    rng = np.random.default_rng(11)
    q, e = rng.lognormal(0, 2, 500), rng.lognormal(-12, 1, 500)
    for d, t, scale in ((4, 0.5, 2.0 ** 8), (96, 30.0, 1.0), (768, 1e3, 2.0 ** -6)):
        cases = [dict(), dict(split=True)] if precision == "fp16" else [dict()]
        cases.append(dict(q_err=e, t_err=t * 1e-4))
        for extra in cases:
            got = precisions.error_bound(precision, d, q, t, scale=scale, **extra)
            want = _bound_as_written(precision, d, q, t, scale=scale, **extra)
            np.testing.assert_allclose(got, want, rtol=1e-12)


def test_bf16_and_tf32_rounding_is_to_nearest_even():
    x = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -9, -1.5, 255.0], np.float32)
    np.testing.assert_array_equal(precisions.round_operand(x, "bf16"),
                                  np.array([1.0, 1 + 2 ** -6, 1.0, -1.5, 255.0], np.float32))
    y = np.array([1 + 2 ** -11, 1 + 3 * 2 ** -11], np.float32)
    np.testing.assert_array_equal(precisions.round_operand(y, "tf32"),
                                  np.array([1.0, 1 + 2 ** -9], np.float32))


def test_fewer_training_rows_than_k_are_padded():
    rng = np.random.default_rng()
    Q, T = _pixels(4, 2, 8, rng)
    cand = K.local_candidates(Q, prepare_train(T, "int8", True, 128), np.array([1, 2], np.int32),
                              np.arange(2), 3)
    assert np.isinf(cand[:, 2, 0]).all() and (cand[:, 2, 1] == -1).all()
    assert set(cand[:, :2, 1].ravel()) == {0.0, 1.0}


@pytest.mark.parametrize("target", TARGETS)
def test_merge_of_disjoint_shards_equals_whole(target):
    rng = np.random.default_rng()
    m, n, d = _size(target)
    Q, T = _pixels(m, n, d, rng)
    labels = rng.integers(0, 10, n).astype(np.int32)
    index = np.arange(n, dtype=np.int64)
    half = n // 2

    def local(rows):
        return K.local_candidates(Q, prepare_train(T[rows], "int8", True, 128), labels[rows],
                                  index[rows], 3, target="cpu")

    a, b, whole = local(slice(0, half)), local(slice(half, n)), local(slice(0, n))
    np.testing.assert_array_equal(K.merge(a, b, target=target), whole)
    np.testing.assert_array_equal(K.merge(b, a, target=target), whole)


def _reference_vote(cand, n_classes, weights):
    proba = np.zeros((len(cand), n_classes))
    for r, row in enumerate(cand):
        d = row[:, 0]
        if weights == "uniform":
            w = np.ones(len(d))
        elif (d == 0).any():
            w = (d == 0).astype(float)
        else:
            w = 1.0 / d
        np.add.at(proba[r], row[:, 2].astype(int), w)
        proba[r] /= w.sum()
    return proba, proba.argmax(1)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("weights", ["distance", "uniform"])
def test_vote_matches_reference(target, weights):
    rng = np.random.default_rng()
    m = 6 if target == "cuda" else 300
    cand = np.empty((m, 5, 3))
    cand[..., 0] = np.sort(rng.integers(0, 30, (m, 5)), axis=1)  # exact matches and ties
    cand[..., 1] = rng.permutation(m * 5).reshape(m, 5)
    cand[..., 2] = rng.integers(0, 4, (m, 5))
    proba, pred = K.vote(cand, 4, weights, target=target)
    ref_proba, ref_pred = _reference_vote(cand, 4, weights)
    np.testing.assert_allclose(proba, ref_proba, rtol=1e-12)
    # Classes whose summed weights tie exactly (1/6 + 1/12 against 1/4, say) differ only
    # by the rounding of the sums' order: either is the vote's answer.
    top = ref_proba.max(axis=1, keepdims=True)
    tied = np.abs(ref_proba - top) <= 1e-12 * top
    assert tied[np.arange(m), pred].all(), np.flatnonzero(~tied[np.arange(m), pred])
    untied = tied.sum(axis=1) == 1
    np.testing.assert_array_equal(pred[untied], ref_pred[untied])


@pytest.mark.parametrize("requested, eight_bit, capability, expected", [
    ("auto", True, (9, 0), ("int8", None)),
    ("auto", True, (7, 5), ("int8", None)),
    ("auto", False, (9, 0), ("fp16", None)),
    ("auto", True, None, ("int8", None)),
    ("auto", False, None, ("fp32", None)),
    ("auto", False, (7, 0), ("fp16", None)),
    ("auto", False, (6, 0), ("fp32", None)),
    ("bf16", True, (7, 5), ("fp32", "precision bf16 needs a GPU of compute capability 8.0")),
    ("tf32", False, (9, 0), ("tf32", None)),
])
def test_precision_choice(requested, eight_bit, capability, expected):
    chosen, note = precisions.choose(requested, eight_bit, capability)
    assert chosen == expected[0]
    assert (note is None) == (expected[1] is None) and (note or "").startswith(expected[1] or "")


def test_eight_bit_detection():
    assert precisions.eight_bit_of(np.uint8) == (True, 128)
    assert precisions.eight_bit_of(np.int8) == (True, 0)
    assert precisions.eight_bit_of(np.float32, 0, 255, True) == (True, 128)
    assert precisions.eight_bit_of(np.float32, -3, 100, True) == (True, 0)
    assert not precisions.eight_bit_of(np.float32, 0, 255, False).exact
    assert not precisions.eight_bit_of(np.int32, 0, 300, True).exact


def test_bad_arguments():
    D = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match="K=0"):
        K.smallest(D, 0)
    with pytest.raises(ValueError, match="weights"):
        K.vote(np.zeros((1, 1, 3)), 2, "cosine")
    with pytest.raises(ValueError, match="target"):
        K.sqdist(D, D, target="tpu")
    with pytest.raises(ValueError, match="precision='int8' needs 8-bit integer data.*'auto'"):
        precisions.choose("int8", False, (9, 0))
    train = prepare_train(np.zeros((3, 2), np.uint8), "int8", True, 128)
    with pytest.raises(ValueError, match=r"not integers in \[0, 255\]"):
        K.local_candidates(np.full((1, 2), 0.5, np.float32), train, np.zeros(3, np.int32),
                           np.arange(3), 1)


def test_no_graph_capture_where_ucx_carries_the_messages(monkeypatch):
    """UCX's threads make CUDA calls that a capture in progress breaks: no capture where UCX
    runs; but UCX's packages installed and imported (RAPIDS imports them whatever the
    protocol) start no UCX, and the graphs stay."""
    import sys
    import types

    from mgpu_dask.kernels.launch import capture_allowed

    for name in ("distributed_ucxx", "distributed_ucxx.ucxx", "ucxx", "ucxx.core", "ucp",
                 "ucp.core"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert capture_allowed()

    def module(name, **attributes):
        made = types.ModuleType(name)
        made.__dict__.update(attributes)
        monkeypatch.setitem(sys.modules, name, made)
        return made

    module("distributed_ucxx")
    comm = module("distributed_ucxx.ucxx", ucxx=None)  # imported, no UCX connection yet
    core = module("ucxx.core", _ctx=None)
    module("ucp.core", _ctx=None)
    assert capture_allowed()
    comm.ucxx = types.ModuleType("ucxx")  # Dask made its first UCX connection
    assert not capture_allowed()
    comm.ucxx = None
    core._ctx = object()  # a UCX context made directly (cuML's comms)
    assert not capture_allowed()


_SCALAR_LAYOUTS = """
import numba, numpy as np
from numba.cuda.dispatcher import _Kernel
from mgpu_dask.kernels.launch import _scalar_ok, _scalar_param

class NoExtensions:
    extensions = []

rows = []
for value in (True, False, np.bool_(True), 3, -(1 << 40), np.int32(-7), np.uint8(200),
              np.int16(-3), np.int64(9), np.uint64(5), 1.5, np.float32(2.25), np.float64(-0.5)):
    want = []
    _Kernel._prepare_args(NoExtensions(), numba.typeof(value), value, None, None, want)
    got = _scalar_param(value)
    rows.append((repr(value), _scalar_ok(value), type(got).__name__, got.value,
                 type(want[0]).__name__, want[0].value))
print(rows)
"""


def test_direct_launch_lays_scalars_out_as_numba_does():
    """``launch._scalar_param`` gives each scalar the ctypes type and value that Numba's own
    launch gives it for the type Numba infers (a bool as a byte, a Python int as int64,
    a NumPy scalar in its own type); scalars it cannot lay out take Numba's launch.
    Numba's launch code is read in a process without the simulator (which replaces it)."""
    import ast
    import os
    import subprocess
    import sys

    from mgpu_dask.kernels.launch import _scalar_ok

    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, "-c", _SCALAR_LAYOUTS], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert len(rows) == 13
    for value, ok, got_type, got, want_type, want in rows:
        assert ok and (got_type, got) == (want_type, want), value
    for value in (np.float16(1.0), 1 << 64, "3", None, 1j):
        assert not _scalar_ok(value)
