"""A user's own float data on a GPU: the float16 fused search (plain and in three parts)
against a float64 brute force, the search of 10,000 queries over a million clustered rows
in one chunk (which ran out of memory before), and logistic regression's CUDA graph in a
``LocalCUDACluster`` the user started."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")

from mgpu_dask.kernels import knn as K  # noqa: E402
from mgpu_dask.kernels.knn import fused  # noqa: E402
from mgpu_dask.kernels.knn.operands import prepare_train  # noqa: E402


def _clustered(rng, n, d, centres=20, spread=0.3):
    middle = rng.standard_normal((centres, d)) * 2 + 1.0
    return (middle[rng.integers(0, centres, n)]
            + spread * rng.standard_normal((n, d))).astype(np.float32)


def _truth(X, Q, k, metric):
    """Float64 neighbours on the GPU: (values the search ranks by, indices)."""
    Xg, Qg = cupy.asarray(X, np.float64), cupy.asarray(Q, np.float64)
    if metric == "cosine":
        Xg /= cupy.maximum(cupy.linalg.norm(Xg, axis=1, keepdims=True), 1e-300)
        Qg /= cupy.maximum(cupy.linalg.norm(Qg, axis=1, keepdims=True), 1e-300)
    if metric in ("cosine", "inner_product"):
        keys = -(Qg @ Xg.T)
    else:
        keys = ((Qg[:, None, :] - Xg[None]) ** 2).sum(-1) if len(X) <= 4096 else \
            (Xg * Xg).sum(1)[None] - 2 * Qg @ Xg.T + (Qg * Qg).sum(1)[:, None]
    order = cupy.argsort(keys, axis=1)[:, :k]
    return cupy.asnumpy(cupy.take_along_axis(keys, order, 1)), cupy.asnumpy(order)


def _agree(cand, want_keys, want_ind, metric, rtol=1e-5):
    """The same neighbours up to ties at the k-th."""
    got = cand[..., 1].astype(np.int64)
    for row in range(len(got)):
        if set(got[row]) != set(want_ind[row]):
            gap = abs(want_keys[row, -1] - want_keys[row, -2]) if want_keys.shape[1] > 1 else 0
            assert gap <= rtol * max(1.0, abs(want_keys[row, -1])), (row, got[row], want_ind[row])


@pytest.mark.parametrize("metric", ["euclidean", "cosine", "inner_product"])
@pytest.mark.parametrize("d", [32, 37, 128])
def test_float16_search_finds_the_exact_neighbours(metric, d):
    rng = np.random.default_rng(d)
    X, Q = _clustered(rng, 20_000, d), _clustered(rng, 1_000, d)
    y = cupy.zeros(len(X), np.int32)
    index = cupy.arange(len(X), dtype=cupy.int64)
    want = _truth(X, Q, 10, metric)
    train = prepare_train(cupy.asarray(X), "fp16", False, 0, metric=metric, split=True)
    runs = {}
    for fused_float in (True, False):
        fused.FLOAT = fused_float
        try:
            stats: dict = {}
            cand = cupy.asnumpy(K.local_candidates(cupy.asarray(Q), train, y, index, 10,
                                                   stats=stats))
        finally:
            fused.FLOAT = True
        _agree(cand, *want, metric)
        runs[fused_float] = (cand, stats)
        train.loops.clear()  # the next search makes its own loops
    assert "fused" in runs[True][1]["search"] and "fp16" in runs[True][1]["search"]
    assert "tile loop" in runs[False][1]["search"]
    np.testing.assert_array_equal(runs[True][0][..., 1], runs[False][0][..., 1])


def test_the_three_part_product_settles_near_ties_on_the_gpu():
    rng = np.random.default_rng(3)
    d, n = 4, 300
    q = rng.standard_normal(d) + 25.0
    directions = rng.standard_normal((n, d))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    near = q + directions * (1.0 + 2e-3 * rng.permutation(n))[:, None]
    X = np.vstack([near, -q + 0.1 * rng.standard_normal((n, d))]).astype(np.float32)
    Q = np.repeat(q[None].astype(np.float32), 64, axis=0)
    train = prepare_train(cupy.asarray(X), "fp16", False, 0, split=True)
    stats: dict = {}
    cand = cupy.asnumpy(K.local_candidates(cupy.asarray(Q), train, cupy.zeros(len(X), np.int32),
                                           cupy.arange(len(X)), 5, stats=stats))
    want_keys, want_ind = _truth(X, Q[:1], 5, "euclidean")
    for row in cand:
        np.testing.assert_array_equal(row[:, 1], want_ind[0])
    assert stats["rows_split"] == len(Q) and stats["rows_recomputed"] == 0


def test_query_rows_with_nan_are_refused_after_a_search_that_waits_for_nothing():
    """On a GPU the queries' check is read after the search (no wait before it): rows
    with NaN or infinity still get the one clear error, and the training block searches
    as before afterwards."""
    from mgpu_dask.exceptions import DataError
    from mgpu_dask.knn import blocks

    rng = np.random.default_rng(5)
    X, Q = _clustered(rng, 20_000, 32), _clustered(rng, 2_000, 32)
    train = prepare_train(cupy.asarray(X), "fp16", False, 0, split=True)
    y = cupy.zeros(len(X), np.int32)
    before = cupy.asnumpy(blocks.search(cupy.asarray(Q), train, y, 0, 10, None, None))
    for bad in (np.nan, np.inf):
        Qb = Q.copy()
        Qb[1234, 7] = bad
        with pytest.raises(DataError, match="query rows contain NaN or infinity"):
            blocks.search(cupy.asarray(Qb), train, y, 0, 10, None, None)
    after = cupy.asnumpy(blocks.search(cupy.asarray(Q), train, y, 0, 10, None, None))
    np.testing.assert_array_equal(after, before)
    _agree(after, *_truth(X, Q, 10, "euclidean"), "euclidean")


@pytest.mark.slow
def test_ten_thousand_queries_over_a_million_clustered_rows_in_one_chunk():
    """The search that ran out of memory on a 141 GB GPU: queries in passes, uncertain rows
    in the three-part product and float64 tiles, never the whole distance matrix."""
    import dask.array as da
    from dask_cuda import LocalCUDACluster
    from distributed import Client

    from mgpu_dask import KNeighborsClassifier

    rng = np.random.default_rng(0)
    X, Q = _clustered(rng, 1_000_000, 128, centres=100), _clustered(rng, 10_000, 128, centres=100)
    y = rng.integers(0, 10, len(X)).astype(np.int32)
    with LocalCUDACluster(n_workers=1, dashboard_address=None) as cluster, Client(cluster):
        Xd = da.from_array(X, chunks=250_000).map_blocks(cupy.asarray)
        yd = da.from_array(y, chunks=250_000).map_blocks(cupy.asarray)
        model = KNeighborsClassifier(10, weights="uniform").fit(Xd, yd)
        Qd = da.from_array(Q, chunks=-1).map_blocks(cupy.asarray)
        dist, ind = model.kneighbors(Qd)
        ind = cupy.asnumpy(ind.compute())
    want_keys, want_ind = _truth(X, Q[:200], 10, "euclidean")
    _agree(np.stack([np.zeros_like(ind[:200]), ind[:200]], axis=-1).astype(float), want_keys,
           want_ind, "euclidean")


def test_logistic_regression_keeps_its_graph_in_the_users_local_cuda_cluster():
    """Float features, classes 3 / 7 / 100 / 250, a LocalCUDACluster with its defaults (not
    ours): every L-BFGS iteration one CUDA graph, and no note of a fallback."""
    import dask.array as da
    from dask_cuda import LocalCUDACluster
    from distributed import Client
    from sklearn.linear_model import LogisticRegression as SklearnLR

    from mgpu_dask import LogisticRegression

    rng = np.random.default_rng(1)
    X = rng.standard_normal((100_000, 37)).astype(np.float32)
    w = rng.standard_normal((37, 4))
    y = np.array([3, 7, 100, 250])[np.argmax(X @ w + rng.gumbel(size=(100_000, 4)), axis=1)]
    with LocalCUDACluster(dashboard_address=None) as cluster, Client(cluster):
        Xd = da.from_array(X, chunks=25_000).map_blocks(cupy.asarray)
        model = LogisticRegression(max_iter=50).fit(Xd, da.from_array(y, chunks=25_000))
        assert model.graph_ is True, model.notes_
        assert not [n for n in model.notes_ if "graph" in n], model.notes_
        pred = model.predict(X)
        # Persisted rows fitted again: the device L-BFGS made for them is taken up again
        Xp, yp = Xd.persist(), da.from_array(y, chunks=25_000).persist()
        first = LogisticRegression(max_iter=50).fit(Xp, yp)
        again = LogisticRegression(max_iter=50).fit(Xp, yp)
        assert again.fit_profile_["state kept"], again.fit_profile_
        np.testing.assert_allclose(again.coef_, first.coef_, rtol=1e-6, atol=1e-7)
        # NumPy chunks go to the GPUs of the workers computing them: the same fit, graph too
        host = LogisticRegression(max_iter=50).fit(da.from_array(X, chunks=25_000),
                                                   da.from_array(y, chunks=25_000))
        assert host.graph_ is True, host.notes_
        np.testing.assert_allclose(host.coef_, model.coef_, rtol=1e-4, atol=1e-6)
        # An elastic net runs OWL-QN in the same device loop, one graph per iteration
        elastic = LogisticRegression(max_iter=50, l1_ratio=0.5, C=0.01).fit(
            Xd, da.from_array(y, chunks=25_000))
        assert (elastic.optimizer_, elastic.graph_) == ("device", True), elastic.notes_
        assert (elastic.coef_ == 0).any()
        # Weighted rows: single-host on the device too, the solution of the fit here
        w = rng.uniform(0.2, 3.0, len(y))
        weighted = LogisticRegression(max_iter=50, class_weight="balanced").fit(
            Xd, da.from_array(y, chunks=25_000), sample_weight=w)
        assert (weighted.comm_, weighted.optimizer_) == ("single-host", "device"), \
            weighted.comm_note_
        here = LogisticRegression(max_iter=50, class_weight="balanced").fit(
            cupy.asarray(X), y, sample_weight=w)
        assert here.optimizer_ == "device"
        np.testing.assert_allclose(weighted.coef_, here.coef_, rtol=1e-3, atol=1e-5)
    sk = SklearnLR(max_iter=50).fit(X, y)
    assert (pred == sk.predict(X)).mean() > 0.999


@pytest.mark.parametrize("params, weighted", [({"class_weight": "balanced"}, True),
                                               ({"C": np.inf}, False),
                                               ({"fit_intercept": False}, False),
                                               ({"l1_ratio": 0.5, "C": 0.1}, False)])
def test_logistic_regression_options_on_gpu_rows_are_scikit_learns(params, weighted):
    import warnings

    from sklearn.linear_model import LogisticRegression as SklearnLR

    from mgpu_dask import LogisticRegression

    rng = np.random.default_rng(4)
    X = (rng.standard_normal((20_000, 24)) * rng.uniform(0.5, 2, 24)).astype(np.float32)
    y = np.array([3, 7, 100, 250])[np.argmax(X @ rng.standard_normal((24, 4))
                                             + rng.gumbel(size=(20_000, 4)), axis=1)]
    fit = {"sample_weight": rng.uniform(0.2, 3, len(y))} if weighted else {}
    ours = LogisticRegression(max_iter=2000, tol=1e-6, **params).fit(cupy.asarray(X), y, **fit)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sk = SklearnLR(max_iter=20_000, tol=1e-10, solver="saga" if "l1_ratio" in params
                       else "lbfgs", **params).fit(X.astype(np.float64), y, **fit)
    assert ours.optimizer_ == "device" and ours.graph_ is not False, ours.notes_
    if "l1_ratio" in params:
        # On these 20,000 unscaled rows ours and saga's coefficients were 2e-3 apart in the
        # first GPU run: the check is that ours reaches saga's objective (in float64), with
        # its zeros
        def objective(model):
            z = X.astype(np.float64) @ model.coef_.T + model.intercept_
            z -= z.max(axis=1, keepdims=True)
            codes = np.searchsorted(model.classes_, y)
            loss = (np.log(np.exp(z).sum(axis=1)) - z[np.arange(len(y)), codes]).mean()
            W = model.coef_
            return loss + (0.25 * (W * W).sum() + 0.5 * np.abs(W).sum()) / (0.1 * len(y))

        # (to 1e-6 relative, ours' tol: its float32 sums on the GPU move the last digits)
        assert objective(ours) <= objective(sk) + 1e-6 * abs(objective(sk))
        np.testing.assert_array_equal(ours.coef_ == 0, sk.coef_ == 0)
    else:
        assert np.abs(ours.coef_ - sk.coef_).max() <= 1e-3 * np.abs(sk.coef_).max()
    if params.get("fit_intercept") is False:  # the device L-BFGS, one graph an iteration
        assert ours.graph_ is True, ours.notes_
        assert not np.any(ours.intercept_)


@pytest.mark.parametrize("weighted", [False, True])
def test_float_rows_evaluate_in_one_pass_as_by_products(monkeypatch, weighted):
    """A shard past ``ONE_PASS_FROM`` rows of 20 float32 features and 4 classes: the one-pass
    evaluation's loss and gradients are float64 NumPy's to float32's error, as the cuBLAS
    products' are; a fit says it ran so and reaches the products' solution."""
    from conftest import softmax_reference

    from mgpu_dask import LogisticRegression
    from mgpu_dask.kernels.logreg import cuda_float, onepass_tf32
    from mgpu_dask.kernels.logreg.objective import ShardObjective

    monkeypatch.setattr(onepass_tf32, "ENABLED", False)  # its own tests: test_logreg_tensor_pass
    rng = np.random.default_rng(3)
    n, d, k = cuda_float.ONE_PASS_FROM + 75_000, 20, 4
    X = rng.standard_normal((n, d)).astype(np.float32)
    y = rng.integers(0, k, n).astype(np.int32)
    w = rng.uniform(0.2, 3.0, n).astype(np.float32) if weighted else None
    W, b = rng.standard_normal((d, k)) * 0.2, rng.standard_normal(k) * 0.2
    resid, loss = softmax_reference(X.astype(np.float64) @ W + b, y)
    if weighted:
        resid, loss = resid * w[:, None], loss * w
    want = (loss.sum(), X.T.astype(np.float64) @ resid, resid.sum(axis=0))

    def evaluated() -> tuple[bool, tuple]:
        o = ShardObjective(cupy.asarray(X), cupy.asarray(y), k,
                           weights=None if w is None else cupy.asarray(w))
        return o.one_pass, o(W, b)

    def fitted() -> LogisticRegression:
        return LogisticRegression(max_iter=200, tol=1e-7).fit(cupy.asarray(X), y, sample_weight=w)

    ran, one = evaluated()
    assert ran
    first = fitted()
    assert first.fit_profile_["evaluation"] == "fp32 in one pass", first.fit_profile_
    monkeypatch.setattr(cuda_float, "ONE_PASS_FROM", n + 1)
    ran, products = evaluated()
    assert not ran
    again = fitted()
    assert again.fit_profile_["evaluation"] == "fp32"
    for got in (one, products):
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
        np.testing.assert_allclose(got[1], want[1], atol=1e-4 * np.abs(want[1]).max())
        np.testing.assert_allclose(got[2], want[2], atol=1e-4 * np.abs(want[2]).max())
    np.testing.assert_allclose(first.coef_, again.coef_, rtol=1e-3, atol=1e-5)


def test_a_fit_of_two_float_shards_evaluates_each_in_one_pass():
    """Two shards past ``ONE_PASS_FROM`` rows (on two GPUs where there are two): each is
    evaluated in one pass, and the fit reaches the solution of the same rows as one shard."""
    from mgpu_dask.kernels.logreg import cuda_float
    from mgpu_dask.logreg.lbfgs import loop
    from mgpu_dask.logreg.lbfgs.device import DeviceBackend

    rng = np.random.default_rng(5)
    n, d, k = cuda_float.ONE_PASS_FROM + 5_000, 16, 3
    X = rng.standard_normal((2 * n, d)).astype(np.float32)
    y = np.argmax(X @ rng.standard_normal((d, k)) + rng.gumbel(size=(2 * n, k)), 1).astype(np.int32)
    second = min(1, cupy.cuda.runtime.getDeviceCount() - 1)
    shards = []
    for gpu, rows in ((0, slice(0, n)), (second, slice(n, 2 * n))):
        with cupy.cuda.Device(gpu):
            shards.append((cupy.asarray(X[rows]), cupy.asarray(y[rows])))
    two = DeviceBackend(shards, k, 2 * n, 1.0 / (2 * n))
    assert [o.one_pass for o in two.objectives] == [True, True]
    one = DeviceBackend([(cupy.asarray(X), cupy.asarray(y))], k, 2 * n, 1.0 / (2 * n))
    got, want = (loop.run(b, maxiter=300, gtol=1e-6) for b in (two, one))
    np.testing.assert_allclose(got["fun"], want["fun"], rtol=1e-6)
    np.testing.assert_allclose(got["x"], want["x"], rtol=1e-3, atol=1e-3 * np.abs(want["x"]).max())
