"""KNN on a user's own data: every metric, dtype and chunking, memory in passes and tiles,
and exact neighbours from a reduced-precision product, against scikit-learn's brute force.

On a CPU the tensor-core precisions are emulated (operands rounded as a GPU rounds them),
so the certification and the tiers behind it run here as they do on a GPU.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
from sklearn.neighbors import KNeighborsClassifier as SklearnKNN
from sklearn.neighbors import NearestNeighbors

from mgpu_dask import DataError, KNeighborsClassifier
from mgpu_dask.kernels import knn as K
from mgpu_dask.kernels.knn import search
from mgpu_dask.kernels.knn.operands import prepare_train


def _clustered(rng, n, d, centres=8, spread=0.05, offset=2.0):
    """Tight clusters far from the origin: what makes a reduced-precision key uncertain."""
    middle = rng.standard_normal((centres, d)) + offset
    return (middle[rng.integers(0, centres, n)]
            + spread * rng.standard_normal((n, d))).astype(np.float32)


def _reference(X, Q, k, metric):
    """scikit-learn's neighbours (inner product: NumPy's, largest first, ties to the
    smaller row) and their distances."""
    if metric == "inner_product":
        ip = Q.astype(np.float64) @ X.astype(np.float64).T
        order = np.argsort(-ip, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(ip, order, 1), order
    nn = NearestNeighbors(n_neighbors=k, algorithm="brute", metric=metric)
    dist, ind = nn.fit(X.astype(np.float64)).kneighbors(Q.astype(np.float64))
    return dist, ind


def _same_neighbours(got_ind, got_dist, want_ind, want_dist):
    """The same index sets up to ties (equal distances may swap places)."""
    np.testing.assert_allclose(got_dist, want_dist, rtol=1e-5, atol=1e-6)
    for row, (g, w) in enumerate(zip(got_ind, want_ind)):
        if set(g) != set(w):  # only rows whose k-th distance ties may differ
            kth = want_dist[row, -1]
            assert np.isclose(got_dist[row, -1], kth, rtol=1e-6), (row, g, w)


@pytest.mark.parametrize("metric", ["euclidean", "sqeuclidean", "cosine", "inner_product"])
@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_every_metric_equals_the_brute_force(metric, precision):
    rng = np.random.default_rng()
    X = _clustered(rng, 400, 13)
    Q = _clustered(rng, 60, 13)
    y = rng.integers(0, 3, len(X))
    weights = "uniform" if metric == "inner_product" else "distance"
    model = KNeighborsClassifier(5, metric=metric, precision=precision, weights=weights)
    dist, ind = model.fit(X, y).kneighbors(Q)
    want_dist, want_ind = _reference(X, Q, 5, metric)
    _same_neighbours(ind, dist, want_ind, want_dist)
    if metric != "inner_product":
        sk = SklearnKNN(5, metric=metric, weights=weights, algorithm="brute")
        sk.fit(X.astype(np.float64), y)
        np.testing.assert_array_equal(model.predict(Q), sk.predict(Q.astype(np.float64)))


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32, np.int64, np.uint8])
def test_any_dtype_is_searched_as_its_float32_values(dtype):
    rng = np.random.default_rng()
    if np.issubdtype(dtype, np.integer):
        high = 255 if dtype == np.uint8 else 5000
        X = rng.integers(0, high, (300, 9)).astype(dtype)
        Q = rng.integers(0, high, (40, 9)).astype(dtype)
    else:
        X = rng.standard_normal((300, 9)).astype(dtype)
        Q = rng.standard_normal((40, 9)).astype(dtype)
    y = rng.integers(0, 4, len(X))
    for metric in ("euclidean", "cosine"):
        dist, ind = KNeighborsClassifier(4, metric=metric).fit(X, y).kneighbors(Q)
        want_dist, want_ind = _reference(X.astype(np.float32), Q.astype(np.float32), 4, metric)
        _same_neighbours(ind, dist, want_ind, want_dist)


@pytest.mark.parametrize("d", [1, 2, 300])
def test_any_number_of_features(d):
    rng = np.random.default_rng()
    X, Q = rng.standard_normal((200, d)), rng.standard_normal((30, d))
    y = rng.integers(0, 2, 200)
    dist, ind = KNeighborsClassifier(3, precision="fp16").fit(X, y).kneighbors(Q)
    _same_neighbours(ind, dist, *_reference(X, Q, 3, "euclidean")[::-1])


def test_dask_arrays_of_any_chunking(client):
    """Ragged row blocks, features split over blocks, queries in many blocks or one."""
    rng = np.random.default_rng()
    X = _clustered(rng, 500, 11)
    Q = _clustered(rng, 90, 11)
    y = rng.integers(0, 5, 500)
    sk = SklearnKNN(4, weights="distance", algorithm="brute").fit(X, y)
    Xd = da.from_array(X, chunks=((123, 77, 300), (4, 7)))
    yd = da.from_array(y, chunks=((123, 77, 300),))
    for plan in ("replicate", "shard"):
        model = KNeighborsClassifier(4, plan=plan).fit(Xd, yd)
        for chunks in (((13, 40, 37), (11,)), ((90,), (5, 6))):
            got = model.predict(da.from_array(Q, chunks=chunks)).compute()
            np.testing.assert_array_equal(got, sk.predict(Q))
        dist, ind = model.kneighbors(da.from_array(Q, chunks=30))
        want_dist, want_ind = sk.kneighbors(Q)
        _same_neighbours(ind.compute(), dist.compute(), want_ind, want_dist)


def test_a_small_tile_budget_makes_many_passes_and_tiles(monkeypatch):
    """Query rows in passes and training rows in tiles, both forced small: the same answer."""
    rng = np.random.default_rng()
    X, Q = _clustered(rng, 700, 10), _clustered(rng, 333, 10)
    y = rng.integers(0, 3, 700).astype(np.int32)
    passes = []
    real = search._search_pass
    monkeypatch.setattr(search, "_search_pass", lambda Q, *a: passes.append(len(Q)) or real(Q, *a))
    monkeypatch.setattr(search, "PASS_ROWS", (16, 1 << 17))
    train = prepare_train(X, "fp16", False, 0, split=True)
    cand = K.local_candidates(Q, train, y, np.arange(700, dtype=np.int64), 5, tile_bytes=4096)
    assert len(passes) > 5 and sum(passes) == len(Q)
    want_dist, want_ind = _reference(X, Q, 5, "euclidean")
    _same_neighbours(cand[..., 1].astype(int), cand[..., 0], want_ind, want_dist)


def _near_ties(rng, n=300, d=4):
    """One query and training rows at distances 1.000, 1.002, ... from it, and as many
    rows far on the other side, so that centring leaves the norms large: a float16 or
    bfloat16 product's keys are off by far more than the distances' steps, which
    scrambles the ranking well past any fixed margin, and the three-part float16 product's
    bound is below the steps between the 5th and 13th."""
    q = rng.standard_normal(d) + 25.0
    directions = rng.standard_normal((n, d))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    radius = 1.0 + 2e-3 * rng.permutation(n)
    near = q + directions * radius[:, None]
    far = -q + 0.1 * rng.standard_normal((n, d))
    return np.vstack([near, far]).astype(np.float32), q[None].astype(np.float32)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_near_ties_that_a_fixed_margin_misses_are_still_exact(precision):
    rng = np.random.default_rng()
    X, Q = _near_ties(rng)
    y = np.zeros(len(X), np.int32)
    index = np.arange(len(X), dtype=np.int64)
    want_dist, want_ind = _reference(X, Q, 5, "euclidean")
    # The approximate keys alone, with the default margin: the true neighbours are not
    # all among the k + margin kept, so a fixed margin would return wrong ones.
    train = prepare_train(X, precision, False, 0)
    loop = K.loop.tile_loop(train, 1, 5 + 8, False, None)
    loop(Q)
    kept = set(loop.scan.cols[0].tolist())
    assert not set(want_ind[0]) <= kept
    stats: dict = {}
    cand = K.local_candidates(Q, prepare_train(X, precision, False, 0, split=True), y, index, 5,
                              stats=stats)
    np.testing.assert_array_equal(cand[0, :, 1], want_ind[0])
    np.testing.assert_allclose(cand[0, :, 0], want_dist[0], rtol=1e-6)
    assert stats["rows_split"] + stats["rows_recomputed"] == 1
    if precision == "fp16":  # the three-part product settles it without float64
        assert stats["rows_split"] == 1 and stats["rows_recomputed"] == 0


def test_a_block_whose_rows_mostly_need_the_three_part_product_starts_there():
    """Near ties in most query rows: the first search sends them on to the three-part
    product, and the block's later searches start there (one search of every row)."""
    rng = np.random.default_rng()
    X, q = _near_ties(rng)
    Q = np.repeat(q, 40, axis=0)
    train = prepare_train(X, "fp16", False, 0, split=True)
    assert search.tiers(train) == [False, True]
    y, index = np.zeros(len(X), np.int32), np.arange(len(X), dtype=np.int64)
    want_dist, want_ind = _reference(X, Q, 5, "euclidean")
    for run in range(2):
        stats: dict = {}
        cand = K.local_candidates(Q, train, y, index, 5, stats=stats)
        _same_neighbours(cand[..., 1].astype(int), cand[..., 0], want_ind, want_dist)
        assert stats["rows_split"] == (len(Q) if run == 0 else 0)
        assert stats["rows_recomputed"] == 0
    assert train.loops[search.FIRST_TIER] == 1
    assert "three parts" in stats["search"]
    # the uncertain rows' search was a loop of 64 rows (a power of two over 40), no more
    sizes = {key[0] for key in train.loops if key != search.FIRST_TIER and key[4]}
    assert sizes == {64, len(Q)}
    pixels = prepare_train(rng.integers(0, 256, (100, 8)).astype(np.uint8), "int8", True, 128)
    assert search.tiers(pixels) == [False]  # exact keys
    assert search.tiers(prepare_train(X, "bf16", False, 0)) == [False]


@pytest.mark.parametrize("d, n, margin, want", [
    (32, 500, None, 5 + search.MARGIN),          # short lists below both thresholds
    (search.LONG_FEATURES, 500, None, K.MAX_K),  # many features: long lists
    (4, search.LONG_VALUES // 4, None, K.MAX_K),  # a large block: long lists
    (128, 1_000_000, None, K.MAX_K),              # as measured: 1,000,000 x 128 long,
    (32, 100_000, None, 5 + search.MARGIN),       # 100,000 x 32 short
    (search.LONG_FEATURES, 500, 3, 8),            # a margin given is kept
    (search.LONG_FEATURES, 40, None, 40),         # never more than the block's rows
])
def test_lists_are_as_long_as_the_rule_says_and_the_search_keeps_that_many(d, n, margin, want):
    """:func:`search.list_length` picks each case's length, and a search of such a block
    keeps that many candidates a row (its tile loop's K) and is still exact."""
    assert search.list_length(5, margin, d, n, exact=False) == want
    assert search.list_length(5, margin, d, n, exact=True) == 5
    if n > 4096:
        return  # the rule alone: a block that large is no CPU test
    rng = np.random.default_rng()
    X = rng.standard_normal((n, d)).astype(np.float32)
    Q = rng.standard_normal((30, d)).astype(np.float32)
    train = prepare_train(X, "fp16", False, 0, split=True)
    y, index = np.zeros(n, np.int32), np.arange(n, dtype=np.int64)
    cand = K.local_candidates(Q, train, y, index, 5, margin=margin)
    want_dist, want_ind = _reference(X, Q, 5, "euclidean")
    _same_neighbours(cand[..., 1].astype(int), cand[..., 0], want_ind, want_dist)
    assert {key[1] for key in train.loops if key != search.FIRST_TIER} == {want}


def test_the_measured_float16_rounding_bounds_the_keys():
    """The plain float16 bound from each row's measured rounding holds on data with a
    wide dynamic range, and is tighter than float16's worst case."""
    from mgpu_dask.kernels.knn import floats
    from mgpu_dask.kernels.knn import precision as precisions
    from mgpu_dask.kernels.precision import Precision

    rng = np.random.default_rng()
    d = 96
    Q = (rng.standard_normal((120, d)) * rng.lognormal(0, 1, d)).astype(np.float32)
    T = (rng.standard_normal((200, d)) * rng.lognormal(0, 1, d)).astype(np.float32)
    frame = floats.frame_of(np, T, Precision.FP16, False)
    ops, errs = [], []
    for X, query in ((Q, True), (T, False)):
        out = np.zeros((len(X), d), np.float32)
        errs.append(floats.float_operand(np, X, Precision.FP16, frame, query=query,
                                         metric="euclidean", out=out, gpu=False).error)
        ops.append(out.astype(np.float64))
    approx = ops[0] @ ops[1].T / frame.scale ** 2
    exact = (Q - frame.center) @ (T - frame.center).T
    q_norm = np.linalg.norm(Q - frame.center, axis=1)
    t_max = float(np.linalg.norm(T - frame.center, axis=1).max())
    measured = precisions.error_bound("fp16", d, q_norm, t_max, scale=frame.scale,
                                      q_err=errs[0], t_err=float(errs[1].max()))
    worst = precisions.error_bound("fp16", d, q_norm, t_max, scale=frame.scale)
    assert (2 * np.abs(approx - exact) <= measured[:, None]).all()
    # about half the worst case; every row under 0.9 of it (300 draws: at most 0.80)
    assert np.median(measured / worst) < 0.7 and (measured < 0.9 * worst).all()


def test_the_float64_tier_works_in_tiles(monkeypatch):
    """Rows no product certifies are searched in float64 a few training rows at a time."""
    rng = np.random.default_rng()
    X, Q = _clustered(rng, 500, 8, spread=0.01), _clustered(rng, 20, 8, spread=0.01)
    tiles = []
    real = search.smallest
    monkeypatch.setattr(search, "smallest", lambda keys, *a, **kw: tiles.append(keys.shape)
                        or real(keys, *a, **kw))
    monkeypatch.setattr(search, "free_bytes", lambda gpu: 20_000)  # 64 columns a tile
    monkeypatch.setattr(search, "tiers", lambda train: [False])  # no three-part product
    stats: dict = {}
    cand = K.local_candidates(Q, prepare_train(X, "bf16", False, 0), np.zeros(500, np.int32),
                              np.arange(500), 4, margin=0, stats=stats)
    assert stats["rows_recomputed"] == len(Q)  # no margin: nothing certifies
    assert len(tiles) == 8 and all(shape == (len(Q), 64) for shape in tiles[:-1])
    want_dist, want_ind = _reference(X, Q, 4, "euclidean")
    _same_neighbours(cand[..., 1].astype(int), cand[..., 0], want_ind, want_dist)


def test_float16_range_is_kept_for_queries_far_outside_the_training_rows():
    rng = np.random.default_rng()
    X = rng.standard_normal((200, 6)).astype(np.float32)
    Q = np.vstack([rng.standard_normal((3, 6)), np.full((1, 6), 1e6)]).astype(np.float32)
    stats: dict = {}
    cand = K.local_candidates(Q, prepare_train(X, "fp16", False, 0, split=True),
                              np.zeros(200, np.int32), np.arange(200), 3, stats=stats)
    want_dist, want_ind = _reference(X, Q, 3, "euclidean")
    _same_neighbours(cand[..., 1].astype(int), cand[..., 0], want_ind, want_dist)
    assert stats["rows_recomputed"] >= 1  # the far row left float16's range


def test_metric_options_are_checked():
    X, y = np.eye(4), [0, 1, 0, 1]
    with pytest.raises(DataError, match="metric='manhattan' must be one of euclidean"):
        KNeighborsClassifier(metric="manhattan").fit(X, y)
    with pytest.raises(DataError, match="inner_product' has no distance; use weights='uniform'"):
        KNeighborsClassifier(metric="inner_product").fit(X, y)
    with pytest.raises(DataError, match="method='direct' computes distances"):
        KNeighborsClassifier(metric="cosine", method="direct").fit(X, y)
    model = KNeighborsClassifier(1, metric="inner_product", weights="uniform").fit(X, y)
    with pytest.raises(DataError, match="no inner-product metric"):
        model.to_sklearn()


def test_models_convert_with_their_metric():
    rng = np.random.default_rng()
    X, Q = rng.standard_normal((100, 5)), rng.standard_normal((20, 5))
    y = rng.integers(0, 3, 100)
    for metric in ("sqeuclidean", "cosine"):
        ours = KNeighborsClassifier(4, metric=metric).fit(X, y)
        back = KNeighborsClassifier.from_sklearn(ours.to_sklearn())
        assert back.metric == metric
        np.testing.assert_array_equal(back.predict(Q), ours.predict(Q))


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int16])
def test_four_thousand_features_of_any_dtype(dtype):
    rng = np.random.default_rng()
    X = (rng.standard_normal((150, 4096)) * 20).astype(dtype)
    Q = (rng.standard_normal((12, 4096)) * 20).astype(dtype)
    y = rng.integers(0, 3, 150)
    dist, ind = KNeighborsClassifier(4).fit(X, y).kneighbors(Q)
    want_dist, want_ind = _reference(X.astype(np.float64), Q.astype(np.float64), 4, "euclidean")
    _same_neighbours(ind, dist, want_ind, want_dist)
