"""LogisticRegression against scikit-learn's objective, on CPU workers and kernels."""

from __future__ import annotations

import itertools
import json
import re

import numpy as np
import pytest
from conftest import digits_xy, exports_held, shm_segments, softmax_reference
from numba import config, cuda
from sklearn.linear_model import LogisticRegression as SkLR

from mgpu_dask.data import load_dataset, shard, split
from mgpu_dask.exceptions import DataError
from mgpu_dask.parallel.inputs import NotFittedError, to_host
from mgpu_dask.kernels import logreg as L
from mgpu_dask.kernels.logreg import bf16 as logreg_bf16
from mgpu_dask.kernels.logreg import int8 as logreg_int8
from mgpu_dask.logreg import LogisticRegression
from mgpu_dask.cli import main


def objective(coef, intercept, X, y, C, classes):
    """scikit-learn's multinomial L2 objective, in float64."""
    z = X.astype(np.float64) @ coef.T + intercept
    z -= z.max(1, keepdims=True)
    lse = np.log(np.exp(z).sum(1))
    yi = np.searchsorted(classes, y)
    return (lse - z[np.arange(len(y)), yi]).mean() + (coef ** 2).sum() / (2 * C * len(y))


def test_softmax_xent_kernel():
    rng = np.random.default_rng()
    m = 500
    z = (rng.standard_normal((m, 6)) * 5).astype(np.float32)
    y = rng.integers(0, 6, m).astype(np.int32)
    bias = rng.standard_normal(6).astype(np.float32)
    from mgpu_dask.kernels.logreg.cpu import softmax_xent

    resid, loss = softmax_xent(z, y, bias)
    want_resid, want_loss = softmax_reference(z.astype(np.float64) + bias, y)
    np.testing.assert_allclose(resid, want_resid, atol=1e-6)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-6, atol=1e-9)


@pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="CUDA kernels run here only under the simulator")
@pytest.mark.parametrize("n, k, weighted, kernel, shared", [
    (45, 3, False, "tiles", None),     # one partial tile, a thread a row
    (300, 12, True, "tiles", None),    # tiles in turn on each block, rows weighted
    (700, 40, False, "tiles", None),   # two lanes a row, each thread copying 6 rows apart
    (300, 100, True, "tiles", None),   # four lanes a row, rows padded to no bank in common
    (50, 300, False, "tiles", None),   # more classes than threads: some copy two classes
    (40, 1024, True, "tiles", None),   # the most classes it takes: 32 lanes, 8 rows a tile
    (45, 3, False, "rows", None),      # the row kernel: a thread a row
    (700, 40, False, "rows", None),    # two lanes a row, six slices of the column sums
    (30, 1100, True, "rows", None),    # 32 lanes a row, a class a thread in the column sums
    (90, 20, False, "rows", 8),        # classes past the shared sums: added tile by tile
])
def test_cuda_kernel_residual_and_block_sums(monkeypatch, n, k, weighted, kernel, shared):
    """The CUDA kernels (simulated) against float64 NumPy: residual, intercept gradient,
    loss; with sample weights each row's residual and cross-entropy times its weight; in
    the layouts their layout functions pick, with a grid smaller than the tiles."""
    rng = np.random.default_rng()
    z = (rng.standard_normal((n, k)) * 4).astype(np.float32)
    y = rng.integers(0, k, n).astype(np.int32)
    b = rng.standard_normal(k).astype(np.float32)
    w = rng.uniform(0.1, 3.0, n).astype(np.float32) if weighted else np.ones(1, np.float32)
    from mgpu_dask.kernels.launch import launch
    from mgpu_dask.kernels.logreg import cuda as C

    if kernel == "tiles":
        assert k <= C.STAGED_CLASSES
        blocks, threads, lanes, pitch = C.tiles_layout(n, k, 1)
        rows = threads // lanes
        assert lanes * C.STAGE >= k and rows * pitch <= C.TILE_VALUES
        assert pitch >= k and (lanes == 32 or pitch % (2 * lanes) == lanes)
        # the rows of a warp begin on distinct banks, lanes apart
        starts = {(r * pitch) % 32 for r in range(32 // lanes)}
        assert len(starts) == 32 // lanes and all(s % lanes == 0 for s in starts)
        kernel, shape = C.softmax_xent_tiles, [k, pitch]
    else:
        if shared is not None:
            monkeypatch.setattr(C, "SHARED_CLASSES", shared)
        kernel = (C.cuda.jit(C.softmax_xent_rows.py_func) if shared is not None  # read again
                  else C.softmax_xent_rows)
        blocks, threads, lanes = C.layout(n, k, 1)
        assert lanes * C.CLASSES_PER_LANE >= min(k, 32 * C.CLASSES_PER_LANE)
        shape = [k]
    if k > C.STAGED_CLASSES:
        with pytest.raises(ValueError, match="softmax_launch picks softmax_xent_rows"):
            C.tiles_layout(n, k, 1)
    chosen = C.softmax_launch(n, k, 1)  # what an evaluation launches for such rows
    assert chosen[0] is (C.softmax_xent_tiles if k <= C.STAGED_CLASSES else C.softmax_xent_rows)
    if chosen[0] is kernel:
        assert chosen == (kernel, blocks, threads, shape, lanes)
    blocks = min(blocks, 2)  # each block takes several tiles in turn
    resid = np.empty((n, k), dtype=np.float32)
    sums = np.zeros(k + 1, dtype=np.float64)
    launch(kernel, blocks, threads, z.ravel(), *shape, y, b, w, int(weighted), lanes,
           resid.ravel(), sums)
    grad_b, loss = sums[:k], sums[k]
    want_resid, want_loss = softmax_reference(z.astype(np.float64) + b, y)
    if weighted:
        want_resid, want_loss = want_resid * w[:, None], want_loss * w
    np.testing.assert_allclose(resid, want_resid, atol=1e-6)
    np.testing.assert_allclose(grad_b, want_resid.sum(0), atol=1e-5)
    np.testing.assert_allclose(loss, want_loss.sum(), rtol=1e-6)


def test_tiles_layout_fits_every_class_count_on_distinct_banks():
    """For every class count the tile kernel takes: the tile fits its shared array, each
    thread's lane holds at most ``STAGE`` classes, and the rows of a warp start on
    distinct banks, ``lanes`` apart; past it, the layout refuses."""
    from mgpu_dask.kernels.logreg import cuda as C

    for k in range(1, C.STAGED_CLASSES + 1):
        blocks, threads, lanes, pitch = C.tiles_layout(10_000, k, 132)
        assert (threads // lanes) * pitch <= C.TILE_VALUES and lanes * C.STAGE >= k <= pitch
        starts = {(r * pitch) % 32 for r in range(32 // lanes)}
        assert len(starts) == 32 // lanes and all(s % lanes == 0 for s in starts), k
        assert 1 <= blocks <= C.BLOCKS_PER_SM * 132
    with pytest.raises(ValueError, match="softmax_xent_rows"):
        C.tiles_layout(10, C.STAGED_CLASSES + 1, 1)


def test_loss_grad_matches_finite_differences():
    rng = np.random.default_rng()
    X = rng.standard_normal((50, 4)).astype(np.float32)
    y = rng.integers(0, 3, 50).astype(np.int32)
    W = rng.standard_normal((4, 3)) * 0.1
    b = rng.standard_normal(3) * 0.1
    loss, gW, gb = L.loss_grad(X, y, W, b)
    eps = 1e-3
    for i, j in [(0, 0), (3, 2), (1, 1)]:
        Wp, Wm = W.copy(), W.copy()
        Wp[i, j] += eps
        Wm[i, j] -= eps
        numeric = (L.loss_grad(X, y, Wp, b)[0] - L.loss_grad(X, y, Wm, b)[0]) / (2 * eps)
        assert abs(numeric - gW[i, j]) < 1e-2 * max(1, abs(gW[i, j]))
    bp = b.copy()
    bp[1] += eps
    assert abs((L.loss_grad(X, y, W, bp)[0] - loss) / eps - gb[1]) < 5e-2


@pytest.mark.parametrize("C, comm", [(0.05, "single-host"), (1.0, "single-host"), (1.0, "actors")])
def test_objective_matches_sklearn_on_digits(client, C, comm):
    ds = load_dataset("digits")
    s = split(ds.X, ds.y, seed=2)
    X = s.X_train / 16.0
    ours = LogisticRegression(C=C, max_iter=1000, tol=1e-7, comm=comm).fit(
        shard(s.X_train, client, dtype=np.float32, scale=1 / 16), s.y_train)
    assert ours.comm_ == comm
    assert ours.n_evaluations_ >= ours.n_iter_ > 0
    # Both workers live in this process: the leader releases every export, no second trip.
    assert ours.n_round_trips_ == (1 if comm == "single-host" else ours.n_evaluations_)
    assert exports_held() == 0
    if comm == "single-host":
        assert ours.fit_profile_["export and fit"] > ours.fit_profile_["L-BFGS"] > 0
    sk = SkLR(C=C, max_iter=10000, tol=1e-10).fit(X, s.y_train)
    a = objective(ours.coef_, ours.intercept_, X, s.y_train, C, ours.classes_)
    b = objective(sk.coef_, sk.intercept_, X, s.y_train, C, sk.classes_)
    assert abs(a - b) / b < 1e-4
    assert abs(ours.loss_ - a) / a < 1e-5
    acc = ours.score(shard(s.X_test, client, dtype=np.float32, scale=1 / 16), s.y_test)
    assert abs(acc - sk.score(s.X_test / 16.0, s.y_test)) < 0.01


def test_single_host_fit_is_asked_of_the_leader_straight_or_as_a_task(client, monkeypatch):
    """The leader is asked straight (no task); where its blocks moved on it refuses, and
    where this client cannot reach it it is not asked: the same fit then goes as a task
    whose inputs are its blocks."""
    from mgpu_dask.logreg import leader, single_host

    s = split(*digits_xy(), seed=3)
    X = shard(s.X_train, client, dtype=np.float32, scale=1 / 16)
    y = shard(s.y_train, client, like=X)  # labels held beside the rows
    asked, submitted = [], []
    straight, submit = single_host.direct.from_client, client.submit
    monkeypatch.setattr(single_host.direct, "from_client",
                        lambda *a, **k: asked.append(a[2]) or straight(*a, **k))
    monkeypatch.setattr(client, "submit", lambda f, *a, **k: submitted.append(f) or submit(f, *a, **k))
    one = LogisticRegression(C=0.5, max_iter=300, tol=1e-7, comm="single-host").fit(X, y)
    assert asked == [single_host.FIT_HERE] and one.comm_ == "single-host"
    assert single_host.FIT_ON_LEADER not in submitted

    def moved(client, address, function, *args, timeout=None, in_thread=False):
        assert in_thread  # the fit runs in a thread of its own on the leader
        return {"refused": "moved", "message": "block gone"}  # as a leader whose blocks moved

    monkeypatch.setattr(single_host.direct, "from_client", moved)
    again = LogisticRegression(C=0.5, max_iter=300, tol=1e-7, comm="single-host").fit(X, y)
    assert again.comm_ == "single-host" and again.loss_ == one.loss_
    assert submitted.count(single_host.FIT_ON_LEADER) == 1

    def unreachable(*args, **kwargs):  # a leader this client cannot connect to
        raise single_host.direct.WorkerUnreachable("no route")

    monkeypatch.setattr(single_host.direct, "from_client", unreachable)
    third = LogisticRegression(C=0.5, max_iter=300, tol=1e-7, comm="single-host").fit(X, y)
    assert third.comm_ == "single-host" and third.loss_ == one.loss_
    assert submitted.count(single_host.FIT_ON_LEADER) == 2
    assert exports_held() == 0

    class Worker:
        data, address = {}, "tcp://here"

    refused = leader.fit_here([{"own block keys": ["x"], "labels": None, "token": "t"}], None,
                              dask_worker=Worker())
    assert refused == {"refused": "moved", "message": "block 'x' is no longer on worker tcp://here"}


def test_objective_matches_sklearn_on_mnist_subset(client, mnist_dir):
    ds = load_dataset("mnist", data_dir=mnist_dir)
    s = split(ds.X, ds.y, fraction=0.04, seed=5)
    X = s.X_train / 255.0
    ours = LogisticRegression(C=1.0, max_iter=2000, tol=1e-7).fit(
        shard(s.X_train, client, dtype=np.float32, scale=1 / 255), s.y_train)
    sk = SkLR(C=1.0, max_iter=10000, tol=1e-10).fit(X, s.y_train)
    a = objective(ours.coef_, ours.intercept_, X, s.y_train, 1.0, ours.classes_)
    b = objective(sk.coef_, sk.intercept_, X, s.y_train, 1.0, sk.classes_)
    assert abs(a - b) / b < 1e-4


def test_single_host_fit_maps_other_processes_shards(process_client):
    s = split(*digits_xy(), seed=3)
    X = shard(s.X_train, process_client, dtype=np.float32, scale=1 / 16)
    before = shm_segments()
    one = LogisticRegression(C=0.5, max_iter=300, tol=1e-7, comm="single-host").fit(X, s.y_train)
    by_messages = LogisticRegression(C=0.5, max_iter=300, tol=1e-7, comm="actors").fit(X, s.y_train)
    assert one.comm_ == "single-host" and by_messages.comm_ == "actors"
    assert one.n_round_trips_ == 1 < by_messages.n_round_trips_
    assert abs(one.loss_ - by_messages.loss_) / by_messages.loss_ < 1e-6
    np.testing.assert_allclose(one.coef_, by_messages.coef_, atol=1e-3)
    assert shm_segments() <= before, "shared segments left behind"
    assert set(process_client.run(exports_held).values()) == {0}, "exports not released"


def test_weighted_rows_fit_single_host_over_other_processes_shards(process_client):
    """Sample and class weights on a cluster of processes: one round trip, the leader
    mapping the others' shards with each shard's weights sent beside its labels; the
    solution of the same weighted fit by messages, nothing left exported."""
    s = split(*digits_xy(), seed=5)
    X = shard(s.X_train, process_client, dtype=np.float32, scale=1 / 16)
    w = np.random.default_rng(2).uniform(0.2, 3.0, len(s.y_train))
    before = shm_segments()
    params = dict(C=0.5, max_iter=300, tol=1e-7, class_weight="balanced")
    one = LogisticRegression(comm="single-host", **params).fit(X, s.y_train, sample_weight=w)
    by_messages = LogisticRegression(comm="actors", **params).fit(X, s.y_train,
                                                                  sample_weight=w)
    assert (one.comm_, one.n_round_trips_, one.comm_note_) == ("single-host", 1, None)
    assert by_messages.comm_ == "actors"
    assert abs(one.loss_ - by_messages.loss_) / by_messages.loss_ < 1e-6
    np.testing.assert_allclose(one.coef_, by_messages.coef_, atol=1e-3)
    plain = LogisticRegression(comm="single-host", C=0.5, max_iter=300, tol=1e-7).fit(
        X, s.y_train)
    assert np.abs(plain.coef_ - one.coef_).max() > 1e-2  # the weights changed the solution
    assert shm_segments() <= before, "shared segments left behind"
    assert set(process_client.run(exports_held).values()) == {0}, "exports not released"


def test_a_holder_without_the_blocks_says_so():
    """The leader asks a holder for blocks by key; one that no longer has them answers
    PeerUnavailable (the client then fits by actors), not a KeyError."""
    import asyncio
    import types

    from mgpu_dask.parallel import peer_views
    from mgpu_dask.logreg.leader import export_held

    holder = types.SimpleNamespace(data={("x", 0): np.ones((3, 2), np.float32)},
                                   address="tcp://127.0.0.1:1")
    with pytest.raises(peer_views.PeerUnavailable, match=r"\('x', 1\).*tcp://127.0.0.1:1"):
        asyncio.run(export_held("t", [("x", 0), ("x", 1)], np.zeros(6, np.uint8), False,
                                 dask_worker=holder))
    desc = asyncio.run(export_held("t", [("x", 0)], np.zeros(3, np.uint8), False,
                                    dask_worker=holder))
    try:
        assert desc["rows"] == 3 and desc["info"] == {} and desc["arrays"][0]["kind"] == "host"
    finally:
        assert peer_views.release("t") == 1


def test_auto_falls_back_to_actors_when_shards_span_hosts(client, monkeypatch):
    from mgpu_dask.parallel import peer_views

    hosts = (f"host-{i}" for i in itertools.count())  # every export sees another host
    monkeypatch.setattr(peer_views, "_hostname", lambda: next(hosts))
    rng = np.random.default_rng()
    X = shard(rng.standard_normal((200, 4)), client, dtype=np.float32)
    y = (np.arange(200) % 3)
    auto = LogisticRegression(max_iter=50).fit(X, y)
    assert auto.comm_ == "actors" and "more than one host" in auto.comm_note_
    with pytest.raises(peer_views.PeerUnavailable, match="more than one host"):
        LogisticRegression(max_iter=50, comm="single-host").fit(X, y)
    assert exports_held() == 0


def test_opening_a_foreign_host_export_is_refused():
    from mgpu_dask.parallel import peer_views

    with pytest.raises(peer_views.PeerUnavailable, match="lives on host"):
        with peer_views.opened([{"host": "not-this-one", "pid": -1, "arrays": []}]):
            pass


def test_without_a_client(monkeypatch):
    import dask

    import mgpu_dask.parallel.inputs as inputs

    monkeypatch.setattr(inputs, "active_client", lambda: None)
    monkeypatch.setitem(dask.config.config, "scheduler", "threads")
    rng = np.random.default_rng()
    X = rng.standard_normal((300, 5))
    y = np.array([2, 7, 9])[np.argmax(X[:, :3] + 0.3 * rng.standard_normal((300, 3)), axis=1)]
    ours = LogisticRegression(C=2.0, max_iter=500, tol=1e-8).fit(X, y)
    sk = SkLR(C=2.0, max_iter=5000, tol=1e-10).fit(X, y)
    a = objective(ours.coef_, ours.intercept_, X, y, 2.0, ours.classes_)
    b = objective(sk.coef_, sk.intercept_, X, y, 2.0, sk.classes_)
    assert abs(a - b) / b < 1e-4
    np.testing.assert_array_equal(np.unique(to_host(ours.predict(X))), [2, 7, 9])
    proba = to_host(ours.predict_proba(X))
    np.testing.assert_allclose(proba.sum(1), 1.0)


@pytest.mark.parametrize("kwargs, y_kind, match", [
    ({"C": 0}, "ok", "C=0 must be a positive"),
    ({"C": -1.0}, "ok", "positive"),
    ({"solver": "newton"}, "ok", "solver='newton'"),
    ({"comm": "nccl"}, "ok", "comm='nccl' is not one of auto, single-host, actors"),
    ({}, "one-class", "y holds 1 class"),
    ({"classes": [0, 1, 2]}, "outside", r"label\(s\) \[5\] are not among the declared classes"),
    ({}, "nan", "Input X contains NaN"),
    ({}, "float", "Unknown label type"),
    ({"input_scale": 0.0}, "ok", "input_scale=0.0 must be a positive number"),
    ({"input_scale": float("nan")}, "ok", "input_scale=nan must be a positive number"),
    ({"input_scale": "1/255"}, "ok", "input_scale='1/255' must be a positive number"),
])
def test_bad_input(client, kwargs, y_kind, match):
    rng = np.random.default_rng()
    X = rng.standard_normal((40, 3)).astype(np.float32)
    y = np.arange(40) % 3
    if y_kind == "one-class":
        y = np.zeros(40, int)
    elif y_kind == "outside":
        y[7] = 5
    elif y_kind == "nan":
        X[4, 2] = np.nan
    elif y_kind == "float":
        y = y + 0.5
    with pytest.raises(DataError, match=match):
        LogisticRegression(**kwargs).fit(X, y)


def test_predict_on_host_is_one_stage_of_numpy_blocks(client):
    from mgpu_dask.data import shard

    rng = np.random.default_rng(3)
    X = rng.standard_normal((200, 4)).astype(np.float32)
    y = np.array(["a", "b", "c"])[np.argmax(X[:, :3], axis=1)]
    clf = LogisticRegression().fit(X, y)
    Xd = shard(X, client, device="cpu")
    lazy, host = clf.predict(Xd), clf.predict(Xd, on_host=True)
    assert isinstance(host._meta, np.ndarray) and host.dtype == lazy.dtype
    assert len(host.dask) == len(lazy.dask)  # the copy to the host is no extra task
    np.testing.assert_array_equal(host.compute(), clf.predict(X))
    np.testing.assert_array_equal(lazy.compute(), clf.predict(X))


def test_predict_before_fit_and_wrong_width(client):
    with pytest.raises(NotFittedError):
        LogisticRegression().predict(np.zeros((2, 3)))
    clf = LogisticRegression().fit(np.random.default_rng().random((30, 3)), np.arange(30) % 2)
    with pytest.raises(DataError, match="X has 4 features, but LogisticRegression is "
                                        "expecting 3 features as input"):
        clf.predict(np.zeros((2, 4)))


def test_cli_logreg_digits(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["logreg", "--dataset", "digits", "--workers", "2", "--device", "cpu",
                 "--repeats", "1", "--quiet", "--dashboard-address", ":0", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "round trips" in text and "accuracy:" in text
    r = json.loads(out.read_text())
    assert r["task"] == "logreg" and r["accuracy"] > 0.9 and r["evaluations"] >= r["n_iter"]
    assert r["comm"] == "single-host" and r["round_trips"] == 1 and "fit by single-host" in text
    assert set(r["cold"]) >= {"cluster start", "transfer", "fit", "predict", "total"}
    # The shards stay put: a warm fit moves the exports' descriptions, not the rows (345 kB).
    moved = r["bytes_between_workers"]
    assert r["protocol"] == "tcp" and set(moved["warm per repetition"]) == {"fit", "predict"}
    assert moved["warm per repetition"]["fit"] < 20_000
    assert "moved between workers (tcp" in text


def test_cli_logreg_says_once_why_it_stopped(tmp_path, capsys):
    """A fit cut short by --max-iter: one note with the loss and gradient, as scikit-learn does."""
    out = tmp_path / "r.json"
    assert main(["logreg", "--dataset", "digits", "--workers", "1", "--device", "cpu",
                 "--max-iter", "3", "--repeats", "1", "--quiet", "--dashboard-address", ":0",
                 "--json", str(out)]) == 0
    captured = capsys.readouterr()
    r = json.loads(out.read_text())
    assert not r["converged"] and r["stop_reason"] == "maximum number of iterations reached"
    assert r["gradient_max"] > r["tol"] and r["n_iter"] == 3
    notes = [line for line in captured.err.splitlines() if "stopped before converging" in line]
    assert len(notes) == 1 and f"{r['gradient_max']:.2e}" in notes[0]
    assert "converg" not in captured.out


def test_cli_logreg_bad_comm(capsys):
    assert main(["logreg", "--dataset", "digits", "--workers", "1", "--device", "cpu",
                 "--comm", "mpi", "--quiet", "--dashboard-address", ":0"]) == 2
    assert capsys.readouterr().err.strip().startswith("error: comm='mpi' is not one of")


def test_cli_logreg_bad_c(capsys):
    assert main(["logreg", "--dataset", "digits", "--workers", "1", "--device", "cpu", "--C", "0",
                 "--quiet", "--dashboard-address", ":0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: C=0.0 must be a positive") and "\n" not in err


def test_lbfgs_solves_a_quadratic_and_counts():
    from mgpu_dask.logreg.lbfgs.loop import minimize_lbfgs

    rng = np.random.default_rng()
    A = rng.standard_normal((30, 30))
    H = A @ A.T + np.eye(30)
    target = rng.standard_normal(30)

    def fun(x):
        r = x - target
        return 0.5 * float(r @ H @ r), H @ r

    out = minimize_lbfgs(fun, np.zeros(30), maxiter=500, gtol=1e-8, ftol=0.0)
    assert out["success"] and out["message"] == "gradient below gtol"
    np.testing.assert_allclose(out["x"], target, atol=1e-6)
    assert 0 < out["nit"] < out["nfev"] <= 3 * out["nit"] + 5
    capped = minimize_lbfgs(fun, np.zeros(30), maxiter=3, gtol=1e-12)
    assert capped["nit"] == 3 and not capped["success"]


def test_cli_binary_subset_on_every_backend(tmp_path):
    out = tmp_path / "r.json"
    assert main(["logreg", "--dataset", "digits", "--classes", "3,8", "--workers", "2",
                 "--device", "cpu", "--backend", "all", "--repeats", "1", "--quiet",
                 "--dashboard-address", ":0", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    ds = load_dataset("digits")
    parts = split(ds.X, ds.y)
    assert r["classes"] == [3, 8]
    assert r["n_train"] == int(np.isin(parts.y_train, [3, 8]).sum())
    assert r["n_test"] == int(np.isin(parts.y_test, [3, 8]).sum())
    rows = {b["backend"]: b for b in r["backends"]}
    assert rows["numba"]["accuracy"] > 0.95 and rows["sklearn"]["accuracy"] > 0.95


@pytest.mark.parametrize("value, match", [("3", "at least two labels"),
                                          ("3,x", "integer labels separated by commas"),
                                          ("3,42", r"label\(s\) \[42\] do not occur")])
def test_cli_bad_classes(value, match, capsys):
    assert main(["logreg", "--dataset", "digits", "--classes", value, "--device", "cpu",
                 "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(match, err[0])


def _two_shard_problem(scale=8.0):
    rng = np.random.default_rng(0)
    n, d, k = 90, 6, 3
    X = (rng.standard_normal((n, d)) * scale).astype(np.float32)
    y = rng.integers(0, k, n).astype(np.int32)
    return [(X[:50], y[:50]), (X[50:], y[50:])], n, d, k


def _host_objective(shards, n, d, k, penalty):
    def fun(theta):
        W, b = theta[: d * k].reshape(d, k), theta[d * k:]
        parts = [L.loss_grad(Xs, ys, W, b) for Xs, ys in shards]
        loss, gW, gb = (sum(p[i] for p in parts) for i in range(3))
        return (loss / n + 0.5 * penalty * (W * W).sum(),
                np.concatenate([(gW / n + penalty * W).ravel(), gb / n]))
    return fun


@pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="CUDA kernels run here only under the simulator")
@pytest.mark.parametrize("held, bridge", [(None, None), (2, None), (None, 1), (None, 3),
                                          (None, 5)])
def test_device_lbfgs_kernels_follow_the_host_loop(held, bridge, monkeypatch):
    """The device backend's kernels (simulated) take the host backend's every step.

    Badly scaled rows make the first step fail the Wolfe test, so the host's
    line search probes the device and commits; 10 iterations with 3 pairs
    wrap the ring of curvature pairs.  With fewer pairs held in registers by
    ``direction`` (HELD_PAIRS, read when the simulated kernel runs) than stored,
    the rest come from memory: the same steps.  With iterations queued past
    each look (``bridge``), those behind a step not kept are skipped on the
    device: the same steps, the same evaluations counted; a bridge longer than
    a look (5 against 4 per look) makes no step past ``maxiter``.
    """
    from mgpu_dask.kernels.lbfgs import cuda as K
    from mgpu_dask.logreg.lbfgs import loop as lbfgs
    from mgpu_dask.logreg.lbfgs.device import DeviceBackend

    memory, maxiter = 3, 10
    if held is not None:
        monkeypatch.setattr(K, "HELD_PAIRS", held)
    shards, n, d, k = _two_shard_problem()
    penalty = 1.0 / n
    device = DeviceBackend(shards, k, n, penalty, memory=memory, bridge=bridge)
    got = lbfgs.run(device, maxiter=maxiter, gtol=1e-4)
    want = lbfgs.minimize_lbfgs(_host_objective(shards, n, d, k, penalty), np.zeros(d * k + k),
                                maxiter=maxiter, gtol=1e-4, memory=memory)
    assert got["searches"] >= 1 and got["nit"] == want["nit"] == maxiter
    # Iterations run ahead (4 per look in the simulator): the steps queued behind
    # the one the line search took over were skipped and are not counted.
    assert device.run_ahead == 4
    assert got["nfev"] == want["nfev"] and device.syncs < got["nfev"]
    np.testing.assert_allclose(got["x"], want["x"], rtol=1e-9, atol=1e-11)
    assert abs(got["fun"] - want["fun"]) < 1e-12
    assert device.pairs == memory
    assert device.bridge == (bridge or 0) and (device.bridged > 0) == bool(bridge)


@pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="CUDA kernels run here only under the simulator")
def test_device_lbfgs_builds_its_evaluations_before_it_waits_for_the_loops_kernels(monkeypatch):
    """A first fit's evaluations compile their kernels in the fit's process while side
    processes compile the loop's (``launches.compile_ahead``): the backend makes its
    shards' objectives before ``launches``, which waits for those processes."""
    from mgpu_dask.logreg.lbfgs import device as device_mod
    from mgpu_dask.logreg.lbfgs import launches as launches_mod

    seen = []
    real = launches_mod.launches

    def launches(b, *args):
        seen.append(len(getattr(b, "objectives", ())))
        return real(b, *args)

    monkeypatch.setattr(launches_mod, "launches", launches)
    shards, n, d, k = _two_shard_problem()
    backend = device_mod.DeviceBackend(shards, k, n, 1.0 / n, memory=3)
    assert seen == [len(shards)] and len(backend.objectives) == len(shards)


@pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="CUDA kernels run here only under the simulator")
@pytest.mark.parametrize("ahead, bridge", [(1, 0), (16, 0), (1, 1), (2, 2), (3, 2)])
def test_device_lbfgs_stops_where_the_host_loop_stops(ahead, bridge):
    """A stopping rule met in the middle of a run-ahead stops the device there.

    Well-scaled rows and a loose gtol: the host loop stops on the gradient
    after a few iterations; 16 queued at once must make exactly as many, and so
    must looks with iterations queued past each (``bridge``, counted in the
    next look; the last look's bridge is skipped on the device).
    """
    from mgpu_dask.logreg.lbfgs import loop as lbfgs
    from mgpu_dask.logreg.lbfgs.device import DeviceBackend

    shards, n, d, k = _two_shard_problem(scale=0.5)
    penalty = 1.0 / n
    device = DeviceBackend(shards, k, n, penalty, memory=3, run_ahead=ahead, bridge=bridge)
    got = lbfgs.run(device, maxiter=40, gtol=2e-2)
    want = lbfgs.minimize_lbfgs(_host_objective(shards, n, d, k, penalty), np.zeros(d * k + k),
                                maxiter=40, gtol=2e-2, memory=3)
    assert want["success"] and want["message"] == "gradient below gtol" and want["nit"] < 16
    assert (got["nit"], got["nfev"], got["message"]) == (want["nit"], want["nfev"],
                                                          want["message"])
    # start, then one look per run-ahead (its bridge counted in the next)
    looks = want["nit"] if ahead == 1 else -(-want["nit"] // max(ahead, bridge))
    assert device.syncs == 1 + looks
    assert device.bridged == bridge * looks
    np.testing.assert_allclose(got["x"], want["x"], rtol=1e-9, atol=1e-11)


@pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="CUDA kernels run here only under the simulator")
@pytest.mark.parametrize("ahead, exact", [(1, False), (16, False), (16, True)])
def test_device_lbfgs_run_to_its_end_follows_the_host_loop(ahead, exact, monkeypatch):
    """``gtol=0``: the fit runs until its float32 values stop showing decreases, where the
    device's step test keeps a step on its curvature (``rules.acceptable``'s approximate
    branch) and the rise within rounding that follows ends the fit by ``ftol``: the host
    loop's steps, evaluations and stop, with no failed line search at the end.  With the
    values' rounding taken as float64's (``exact``: the int8 evaluations'), which ``arm``
    hands the device, both loops search on where float32's would have kept the step."""
    from mgpu_dask.kernels.lbfgs import rules
    from mgpu_dask.logreg.lbfgs import loop as lbfgs
    from mgpu_dask.logreg.lbfgs.device import DeviceBackend

    shards, n, d, k = _two_shard_problem(scale=0.5)
    penalty = 1.0 / n
    rounding = rules.FLOAT64_ROUNDING if exact else rules.FLOAT32_ROUNDING
    monkeypatch.setattr(DeviceBackend, "rounding", property(lambda self: rounding))
    device = DeviceBackend(shards, k, n, penalty, memory=3, run_ahead=ahead)
    got = lbfgs.run(device, maxiter=80, gtol=0.0)
    fun = _host_objective(shards, n, d, k, penalty)
    want = lbfgs.minimize_lbfgs(fun, np.zeros(d * k + k), maxiter=80, gtol=0.0, memory=3,
                                rounding=rounding)
    assert want["nit"] < 80
    assert (got["nit"], got["nfev"], got["message"]) == (want["nit"], want["nfev"],
                                                          want["message"])
    if exact:  # the other rounding takes another path: the test tells them apart
        other = lbfgs.minimize_lbfgs(fun, np.zeros(d * k + k), maxiter=80, gtol=0.0,
                                     memory=3)
        assert (other["nfev"], other["message"]) != (want["nfev"], want["message"])
    else:
        assert want["message"] == "relative decrease below ftol"
        assert got["nfev"] <= got["nit"] + got["searches"] + 2
    np.testing.assert_allclose(got["x"], want["x"], rtol=1e-9, atol=1e-11)


@pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="CUDA kernels run here only under the simulator")
def test_device_lbfgs_without_an_intercept_follows_the_host_loop():
    """``fit_intercept=False`` on the device: the intercept's gradient held at zero after
    each evaluation, the same steps as the host loop's objective without it, the
    intercept still zero at the end."""
    from mgpu_dask.logreg.lbfgs import loop as lbfgs
    from mgpu_dask.logreg.lbfgs.device import DeviceBackend

    shards, n, d, k = _two_shard_problem()
    penalty = 1.0 / n
    with_b = _host_objective(shards, n, d, k, penalty)

    def without_b(theta):
        value, grad = with_b(theta)
        return value, np.concatenate([grad[: d * k], np.zeros(k)])

    device = DeviceBackend(shards, k, n, penalty, memory=3, fit_intercept=False)
    got = lbfgs.run(device, maxiter=8, gtol=1e-6)
    want = lbfgs.minimize_lbfgs(without_b, np.zeros(d * k + k), maxiter=8, gtol=1e-6, memory=3)
    assert (got["nit"], got["nfev"]) == (want["nit"], want["nfev"])
    np.testing.assert_allclose(got["x"], want["x"], rtol=1e-9, atol=1e-11)
    assert not np.any(got["x"][d * k:])
    free = lbfgs.minimize_lbfgs(with_b, np.zeros(d * k + k), maxiter=8, gtol=1e-6, memory=3)
    assert np.any(free["x"][d * k:])  # with an intercept it would have moved


@pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="CUDA kernels run here only under the simulator")
@pytest.mark.parametrize("scale, l1, ahead, bridge, maxiter", [
    (8.0, 0.02, None, None, 30), (8.0, 0.02, 1, 0, 30), (0.5, 0.05, 16, 0, 40),
    (0.5, 0.05, None, 2, 40)])
def test_device_owlqn_follows_the_host_loop(scale, l1, ahead, bridge, maxiter):
    """OWL-QN (an L1 part) on the device's kernels takes the host backend's every step:
    the pseudo-gradient's recursion, the orthant projection, the backtracking search
    (badly scaled rows: the host probes the device), the stop on the pseudo-gradient
    in the middle of a run-ahead; the same exact zeros, and some of them."""
    from mgpu_dask.logreg.lbfgs import loop as lbfgs
    from mgpu_dask.logreg.lbfgs.device import DeviceBackend

    shards, n, d, k = _two_shard_problem(scale)
    penalty = 0.5 / n
    device = DeviceBackend(shards, k, n, penalty, memory=3, l1=l1, run_ahead=ahead,
                           bridge=bridge)
    got = lbfgs.run(device, maxiter=maxiter, gtol=1e-6)
    weights = np.concatenate([np.full(d * k, l1), np.zeros(k)])
    want = lbfgs.minimize_lbfgs(_host_objective(shards, n, d, k, penalty), np.zeros(d * k + k),
                                maxiter=maxiter, gtol=1e-6, memory=3, l1=weights)
    assert (got["nit"], got["nfev"], got["searches"], got["message"]) == (
        want["nit"], want["nfev"], want["searches"], want["message"])
    assert want["searches"] >= 1 if scale > 1 else want["message"] == "gradient below gtol"
    np.testing.assert_allclose(got["x"], want["x"], rtol=1e-9, atol=1e-12)
    assert abs(got["fun"] - want["fun"]) < 1e-12 and abs(got["grad_max"] - want["grad_max"]) < 1e-12
    zeros = want["x"][: d * k] == 0
    assert zeros.any() and ((got["x"][: d * k] == 0) == zeros).all()


@pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="CUDA kernels run here only under the simulator")
def test_device_lbfgs_with_row_weights_follows_the_host_loop():
    """Weighted rows on the device (a third array per shard): the mean over the weights'
    sum of each row's cross-entropy times its weight, the host loop's every step; the
    same rows unweighted go elsewhere."""
    from mgpu_dask.logreg.lbfgs import loop as lbfgs
    from mgpu_dask.logreg.lbfgs.device import DeviceBackend

    shards, n, d, k = _two_shard_problem()
    weights = np.random.default_rng(3).uniform(0.1, 3.0, n).astype(np.float32)
    total = float(weights.astype(np.float64).sum())
    penalty = 1.0 / total
    weighted = [(X, y, weights[:50]) for X, y in shards[:1]] + [
        (X, y, weights[50:]) for X, y in shards[1:]]
    device = DeviceBackend(weighted, k, total, penalty, memory=3)
    got = lbfgs.run(device, maxiter=12, gtol=1e-6)

    def fun(theta):
        W, b = theta[: d * k].reshape(d, k), theta[d * k:]
        loss, gW, gb = 0.0, 0.0, 0.0
        for (Xs, ys), ws in zip(shards, (weights[:50], weights[50:])):
            objective = L.ShardObjective(Xs, ys, k, weights=ws)
            part = objective(W, b)
            loss, gW, gb = loss + part[0], gW + part[1], gb + part[2]
        return (loss / total + 0.5 * penalty * (W * W).sum(),
                np.concatenate([(gW / total + penalty * W).ravel(), gb / total]))

    want = lbfgs.minimize_lbfgs(fun, np.zeros(d * k + k), maxiter=12, gtol=1e-6, memory=3)
    assert (got["nit"], got["nfev"]) == (want["nit"], want["nfev"])
    np.testing.assert_allclose(got["x"], want["x"], rtol=1e-9, atol=1e-11)
    plain = lbfgs.minimize_lbfgs(_host_objective(shards, n, d, k, 1.0 / n), np.zeros(d * k + k),
                                 maxiter=12, gtol=1e-6, memory=3)
    assert np.abs(plain["x"] - got["x"]).max() > 1e-3


@pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="CUDA kernels run here only under the simulator")
def test_a_kept_device_lbfgs_fits_again_as_a_new_one_would():
    """The device L-BFGS kept with the rows' blocks (``fit_on_device``'s ``kept_under``):
    a second fit of the same rows, with other labels, starts from it (the labels copied
    in, the state zeroed) and takes the host loop's every step on those labels."""
    from mgpu_dask.kernels.precision import Precision
    from mgpu_dask.logreg import solvers
    from mgpu_dask.parallel import kept_with_blocks
    from mgpu_dask.logreg.lbfgs import loop as lbfgs
    from mgpu_dask.logreg.problem import Problem

    shards, n, d, k = _two_shard_problem(scale=0.5)
    penalty = 1.0 / n
    problem = Problem(n, d, k, penalty, 2, 1e-8, "device", Precision.FP32, None)
    kept = ([X for X, _ in shards], (("x0", "x1"), "device fit", False, None))
    try:
        first = solvers.fit_on_device(shards, problem, kept)
        relabelled = [(X, (y + 1) % k) for X, y in shards]
        again = solvers.fit_on_device(relabelled, problem, kept)
    finally:
        kept_with_blocks.forget("x0")
    assert not first["profile"]["state kept"] and again["profile"]["state kept"]
    for got, rows in ((first, shards), (again, relabelled)):
        want = lbfgs.minimize_lbfgs(_host_objective(rows, n, d, k, penalty),
                                    np.zeros(d * k + k), maxiter=2, gtol=1e-8)
        assert (got["nit"], got["nfev"]) == (want["nit"], want["nfev"])
        np.testing.assert_allclose(got["x"], want["x"], rtol=1e-9, atol=1e-11)
    assert not np.allclose(again["x"], first["x"])


def test_a_kept_device_lbfgs_serves_only_its_rows_and_problem():
    """Another problem, other row arrays or labels of another length make a new backend
    (the kept one is let go); the blocks' keys leaving take it along."""
    from mgpu_dask.kernels.precision import Precision
    from mgpu_dask.logreg import solvers
    from mgpu_dask.parallel import kept_with_blocks
    from mgpu_dask.logreg.lbfgs.device import DeviceBackend
    from mgpu_dask.logreg.problem import Problem

    shards, n, d, k = _two_shard_problem(scale=0.5)
    problem = Problem(n, d, k, 1.0 / n, 2, 1e-8, "device", Precision.FP32, None)
    fingerprint = solvers._fingerprint(problem)
    kept = ([X for X, _ in shards], (("y0", "y1"), "device fit", False, None))

    def keep():
        backend = DeviceBackend(shards, k, n, problem.penalty, precision=problem.precision)
        kept_with_blocks.keep(*kept, (fingerprint, backend))
        return backend

    try:
        backend = keep()
        assert solvers.kept_backend(kept, fingerprint, shards) is backend
        assert kept_with_blocks.take(*kept) is kept_with_blocks.MISSING  # taken out while in use
        keep()
        other = solvers._fingerprint(problem._replace(penalty=2.0 / n))
        assert solvers.kept_backend(kept, other, shards) is None
        assert kept_with_blocks.take(*kept) is kept_with_blocks.MISSING  # let go
        keep()
        copies = [(X.copy(), y) for X, y in shards]
        assert solvers.kept_backend(kept, fingerprint, copies) is None
        keep()
        shorter = [(X, y[:-1]) for X, y in shards]
        assert solvers.kept_backend(kept, fingerprint, shorter) is None
        keep()
        kept_with_blocks.forget("y1")  # one of the blocks left the worker
        assert solvers.kept_backend(kept, fingerprint, shards) is None
    finally:
        kept_with_blocks.forget("y0")


def test_cli_logreg_device_optimizer_refused_on_cpu(capsys):
    assert main(["logreg", "--dataset", "digits", "--workers", "1", "--device", "cpu",
                 "--optimizer", "device", "--repeats", "1", "--quiet"]) != 0
    err = capsys.readouterr().err.strip()
    assert "optimizer='device'" in err and "\n" not in err


@pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="CUDA kernels run here only under the simulator")
def test_bf16_rounding_matches_round_to_nearest():
    """``bf16_round``'s bit pattern and value against NumPy's bfloat16 rounding of float32."""
    from mgpu_dask.kernels.logreg import cuda_bf16 as C
    from mgpu_dask.kernels.knn.precision import round_operand

    rng = np.random.default_rng()
    values = np.concatenate([rng.standard_normal(60) * 10.0 ** rng.integers(-20, 20, 60),
                             [0.0, 1.0, -1.0, 255.0, 256.0, 1 / 255]]).astype(np.float32)
    bits = np.zeros(values.size, dtype=np.uint16)
    rounded = np.zeros(values.size)

    @cuda.jit
    def kernel(v, b, r):
        i = cuda.grid(1)
        if i < v.shape[0]:
            b[i], r[i] = C.bf16_round(v[i])

    kernel[3, 32](values, bits, rounded)
    want = round_operand(values, "bf16")
    np.testing.assert_array_equal((bits.astype(np.uint32) << 16).view(np.float32), want)
    np.testing.assert_array_equal(rounded, want.astype(np.float64))


@pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="CUDA kernels run here only under the simulator")
@pytest.mark.parametrize("n, d, k", [(150, 40, 3), (37, 17, 10)])
def test_bf16_split_evaluation_is_as_exact_as_float32(n, d, k, monkeypatch):
    """Levels, three-term coefficient and residual splits, the terms and row blocks added
    (kernels in the simulator, exact products standing in for cuBLAS): float64 loss and
    gradient to float32's accuracy; rows that are not 8-bit levels are refused."""
    monkeypatch.setattr(logreg_bf16, "GRADIENT_ROWS", 32)  # several row blocks, the last one short
    rng = np.random.default_rng()
    X = rng.integers(0, 256, (n, d)).astype(np.float32) * np.float32(1 / 255)
    X[0, 0] = 1.0  # the largest level, 255
    y = rng.integers(0, k, n).astype(np.int32)
    W, b = rng.standard_normal((d, k)) * 0.3, rng.standard_normal(k) * 0.1
    loss, gW, gb = logreg_bf16.loss_grad(X, y, W, b)
    X64 = X.astype(np.float64)
    z = X64 @ W + b
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    want_loss = -np.log(p[np.arange(n), y]).sum()
    p[np.arange(n), y] -= 1.0
    assert abs(loss - want_loss) <= 1e-7 * want_loss
    np.testing.assert_allclose(gW, X64.T @ p, rtol=0, atol=1e-6 * np.abs(X64.T @ p).max())
    np.testing.assert_allclose(gb, p.sum(axis=0), rtol=0, atol=1e-6 * n)
    off = X.copy()
    off[1, 1] = 0.5001  # between two levels
    assert logreg_bf16.loss_grad(off, y, W, b) is None
    assert logreg_bf16.loss_grad(X * np.float32(300), y, W, b) is not None  # any step
    assert logreg_bf16.loss_grad(X * np.float32(200 / 255) + np.float32(0.3), y, W, b) is None


@pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="CUDA kernels run here only under the simulator")
@pytest.mark.parametrize("rows, cols", [(64, 64), (80, 48), (16, 132)])  # whole and partial tiles
def test_transpose_bytes_is_the_transpose(rows, cols):
    """The word-wise transpose of the int8 levels (uint32 views, 64-byte tiles) against
    NumPy, with tiles cut short on either side."""
    from mgpu_dask.kernels.logreg import cuda_int8 as C
    from mgpu_dask.kernels.launch import launch

    v = np.random.default_rng().integers(-128, 128, (rows, cols)).astype(np.int8)
    vt = np.zeros((cols, rows), dtype=np.int8)
    launch(C.transpose_bytes, *C.transpose_grid(rows, cols), v.view(np.uint32),
           vt.view(np.uint32))
    np.testing.assert_array_equal(vt, v.T)


@pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="CUDA kernels run here only under the simulator")
@pytest.mark.parametrize("n, k", [(300, 10), (37, 3)])  # three blocks, the last partial; one
def test_int8_softmax_kernels_give_the_same_bits(n, k):
    """The int8 evaluation's softmax for up to I8_LOCAL_K classes (logits assembled once,
    the block's sums reduced together) writes the wide kernel's residual terms and block
    sums exactly (the same reduction order)."""
    from mgpu_dask.kernels.logreg import cuda_int8 as C
    from mgpu_dask.kernels.launch import launch

    rng = np.random.default_rng()
    width = logreg_int8.term_columns(k)
    logits = rng.integers(-2**20, 2**20, (width, n)).astype(np.int32)
    labels = rng.integers(0, k, n).astype(np.int32)
    colinfo = np.concatenate([rng.random(k) * 1e-6, rng.standard_normal(k)])
    blocks = -(-n // C.THREADS)
    got = {}
    for kernel in (C.softmax_xent_i8, C.softmax_xent_i8_wide):
        resid8 = np.zeros((width, n), dtype=np.int8)
        bpart = np.zeros((blocks, k + 1), dtype=np.float64)
        launch(kernel, blocks, C.THREADS, logits, labels, colinfo, resid8, bpart)
        got[kernel] = resid8, bpart
    assert C.softmax_xent_i8_for(k) is C.softmax_xent_i8
    assert C.softmax_xent_i8_for(C.I8_LOCAL_K + 1) is C.softmax_xent_i8_wide
    (r1, b1), (r2, b2) = got.values()
    np.testing.assert_array_equal(r1, r2)
    np.testing.assert_array_equal(b1, b2)
    assert np.abs(b1[:, k]).sum() > 0 and np.abs(r1).sum() > 0  # something was computed


@pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="CUDA kernels run here only under the simulator")
@pytest.mark.parametrize("n, d, k", [(150, 40, 3), (37, 17, 10), (40, 12, 20)])  # 20: the wide
def test_int8_split_evaluation_is_more_exact_than_float32(n, d, k, monkeypatch):  # softmax
    """Levels shifted to int8, four-term int8 coefficient and residual splits, exact int32
    products per row block (int64 NumPy products standing in for cuBLAS), blocks and terms
    added: float64's loss and gradient to well below float32's rounding; rows that are not
    8-bit levels in [0, 255] times one step are refused."""
    monkeypatch.setattr(logreg_int8, "GRADIENT_ROWS", 32)  # several row blocks, the last one short
    rng = np.random.default_rng()
    levels = rng.integers(0, 256, (n, d))
    levels[0, 0] = 255
    X = levels.astype(np.float32) * np.float32(1 / 255)
    y = rng.integers(0, k, n).astype(np.int32)
    W, b = rng.standard_normal((d, k)) * 0.3, rng.standard_normal(k) * 0.1
    W[:, 0] *= 1e-4  # a column of small coefficients: scaled per column
    loss, gW, gb = logreg_int8.loss_grad(X, y, W, b)
    # uint8 rows are their own levels: the same evaluation, bit for bit, with no pass over them.
    same = logreg_int8.loss_grad(levels.astype(np.uint8), y, W, b, scale=1 / 255)
    assert same[0] == loss and np.array_equal(same[1], gW) and np.array_equal(same[2], gb)
    # The evaluation takes float32 coefficients (as every GPU path) and the levels exactly.
    W, b = W.astype(np.float32).astype(np.float64), b.astype(np.float32).astype(np.float64)
    X64 = levels / 255.0
    z = X64 @ W + b
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    want_loss = -np.log(p[np.arange(n), y]).sum()
    p[np.arange(n), y] -= 1.0
    want = X64.T @ p
    assert abs(loss - want_loss) <= 1e-9 * want_loss
    # float32 keeps 2**-24 of each value: the gradient here is closer than that.
    np.testing.assert_allclose(gW, want, rtol=2.0 ** -22, atol=1e-7 * np.abs(want).max())
    np.testing.assert_allclose(gb, p.sum(axis=0), rtol=0, atol=1e-9 * n)
    off = X.copy()
    off[1, 1] = 0.5001  # between two levels
    assert logreg_int8.loss_grad(off, y, W, b) is None
    assert logreg_int8.loss_grad(X * np.float32(300), y, W, b) is not None  # any step
    assert logreg_int8.loss_grad(X - np.float32(0.5), y, W, b) is None  # levels below 0


def test_precision_is_checked_and_cloned():
    from sklearn.base import clone

    clf = LogisticRegression(precision="bf16")
    assert clone(clf).get_params()["precision"] == "bf16"
    with pytest.raises(DataError, match="precision='int4' is not one of auto, fp32, int8, bf16"):
        LogisticRegression(precision="int4").fit(np.eye(4), [0, 1, 0, 1])
    # The CPU path is float32 whatever the precision: the same fit.
    X, y = digits_xy()
    a = LogisticRegression(max_iter=30).fit(X / 16.0, y)
    b = clone(clf).set_params(max_iter=30).fit(X / 16.0, y)
    np.testing.assert_array_equal(a.coef_, b.coef_)


def test_label_codes_travel_in_their_smallest_type():
    """The class indices sent with the export tasks: uint8 up to 256 classes, uint16 up to
    65,536, int32 beyond; the values unchanged."""
    from mgpu_dask.logreg.single_host import label_codes as _label_codes

    for n_classes, dtype in ((2, np.uint8), (256, np.uint8), (257, np.uint16),
                             (65536, np.uint16), (65537, np.int32)):
        codes = np.arange(n_classes, dtype=np.int32)[::-1].copy()
        out = _label_codes(codes, n_classes)
        assert out.dtype == dtype
        np.testing.assert_array_equal(out.astype(np.int64), codes)


@pytest.mark.parametrize("comm", ["single-host", "actors"])
def test_uint8_rows_with_input_scale_fit_as_their_scaled_float_copy(client, comm):
    """uint8 rows stay 8-bit on the workers and the model sees ``X * input_scale``: the
    same fit as float32 rows scaled beforehand (the same float32 values reach the same
    products), the same predictions; to_sklearn / from_sklearn work on the rows as passed."""
    rng = np.random.default_rng()
    n, d = 400, 12
    pixels = rng.integers(0, 256, (n, d)).astype(np.uint8)
    y = np.argmax(pixels[:, :3].astype(float) + rng.normal(0, 40, (n, 3)), axis=1)
    scale = 1 / 255
    scaled = pixels.astype(np.float32) * np.float32(scale)
    kw = dict(C=0.5, max_iter=60, comm=comm)
    ours = LogisticRegression(input_scale=scale, **kw).fit(shard(pixels, client), y)
    ref = LogisticRegression(**kw).fit(shard(scaled, client), y)
    assert shard(pixels, client).dtype == np.uint8
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, rtol=1e-6, atol=1e-7)
    assert ours.n_iter_ == ref.n_iter_
    np.testing.assert_array_equal(to_host(ours.predict(pixels)), to_host(ref.predict(scaled)))
    np.testing.assert_allclose(to_host(ours.predict_proba(shard(pixels, client))),
                               to_host(ref.predict_proba(scaled)), rtol=1e-5, atol=1e-6)
    sk = ours.to_sklearn()  # scikit-learn's model of the rows as passed (uint8 values)
    np.testing.assert_array_equal(sk.predict(pixels), to_host(ours.predict(pixels)))
    back = LogisticRegression.from_sklearn(sk, input_scale=scale)
    np.testing.assert_allclose(back.coef_, ours.coef_, rtol=1e-12)
    np.testing.assert_array_equal(to_host(back.predict(pixels)), sk.predict(pixels))


def test_cli_logreg_dtype_uint8_is_float32s_model(tmp_path):
    """--dtype uint8 (the default: rows as loaded, input_scale) and --dtype float32 (scaled
    copies) fit the same model on the same split."""
    runs = {}
    for dtype in ("uint8", "float32"):
        out = tmp_path / f"{dtype}.json"
        assert main(["logreg", "--dataset", "digits", "--workers", "2", "--device", "cpu",
                     "--repeats", "1", "--quiet", "--dashboard-address", ":0", "--dtype", dtype,
                     "--json", str(out)]) == 0
        runs[dtype] = json.loads(out.read_text())
    assert runs["uint8"]["dtype"] == "uint8" and runs["float32"]["dtype"] == "float32"
    assert runs["uint8"]["accuracy"] == runs["float32"]["accuracy"] > 0.9
    assert runs["uint8"]["loss"] == pytest.approx(runs["float32"]["loss"], rel=1e-6)


def test_int8_gradient_blocks_follow_the_shard_size(monkeypatch):
    """Shards of at most SMALL_SHARD_ROWS rows take blocks of SMALL_GRADIENT_ROWS for
    ``v^T R``, larger ones GRADIENT_ROWS, and their levels are padded to whole blocks of
    that size (one block of a multiple of 16 rows where the shard is smaller)."""
    small, large = logreg_int8.SMALL_SHARD_ROWS, logreg_int8.SMALL_SHARD_ROWS + 1
    assert logreg_int8.gradient_rows(small) == logreg_int8.SMALL_GRADIENT_ROWS
    assert logreg_int8.gradient_rows(large) == logreg_int8.GRADIENT_ROWS
    assert logreg_int8.SMALL_GRADIENT_ROWS < logreg_int8.GRADIENT_ROWS
    for n in (5, 8192, 8193, 26250, 52500, small, large, 210000):
        rows, cols = logreg_int8.padded_shape(n, 784)
        block = logreg_int8.gradient_rows(n)
        assert cols == 784 and rows >= n
        assert rows % block == 0 if n > block else rows == -(-n // 16) * 16
        assert rows - n < max(block, 16)  # never a whole block of padding
    monkeypatch.setattr(logreg_int8, "GRADIENT_ROWS", 64)
    monkeypatch.setattr(logreg_int8, "SMALL_GRADIENT_ROWS", 16)
    monkeypatch.setattr(logreg_int8, "SMALL_SHARD_ROWS", 100)
    assert logreg_int8.gradient_rows(100) == 16 and logreg_int8.gradient_rows(101) == 64


@pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="CUDA kernels run here only under the simulator")
def test_int8_evaluation_is_the_same_bits_whatever_the_gradient_blocks(monkeypatch):
    """The blocks of ``v^T R`` are exact int32 sums added in int64: blocks of another size
    give the same loss and gradient, bit for bit."""
    rng = np.random.default_rng(7)
    n, d, k = 150, 24, 4
    X = rng.integers(0, 256, (n, d)).astype(np.uint8)
    y = rng.integers(0, k, n).astype(np.int32)
    W, b = rng.standard_normal((d, k)) * 0.3, rng.standard_normal(k) * 0.1
    got = []
    for rows in (16, 64, 256):  # ten blocks, three, one
        monkeypatch.setattr(logreg_int8, "SMALL_GRADIENT_ROWS", rows)
        got.append(logreg_int8.loss_grad(X, y, W, b, scale=1 / 255))
    for loss, gW, gb in got[1:]:
        assert loss == got[0][0]
        np.testing.assert_array_equal(gW, got[0][1])
        np.testing.assert_array_equal(gb, got[0][2])
    assert np.abs(got[0][1]).sum() > 0


@pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="CUDA kernels run here only under the simulator")
@pytest.mark.parametrize("d", [37, 1100])  # within the held entries, and past them
def test_int8_split_of_the_coefficients_matches_its_statement(d):
    """``split_coef_i8``: each column scaled so its largest entry is I8_TOP, its int8 terms
    the roundings of what the ones before left (times I8_BASE), exactly; ``colinfo`` the
    factor and offset of a logit -- whether an entry was held in registers or read as used."""
    from mgpu_dask.kernels.launch import launch
    from mgpu_dask.kernels.logreg import cuda_int8 as C

    rng = np.random.default_rng(d)
    k = 3
    W = (rng.standard_normal((d, k)) * 0.2).astype(np.float32)
    W[:, 1] = 0.0  # a zero column: scale 1 by rule
    W[d // 2, 2] = -3.0  # its largest entry far from the first held ones
    b = rng.standard_normal(k).astype(np.float32)
    params = np.concatenate([W.ravel(), b])
    step = np.array([1 / 255])
    w8 = np.zeros((logreg_int8.term_columns(k), d), dtype=np.int8)
    colinfo = np.zeros(2 * k)
    launch(C.split_coef_i8, k, C.THREADS, params, step, w8, colinfo)
    for c in range(k):
        w = W[:, c].astype(np.float64)
        top = np.abs(w).max() or 1.0
        scale = C.I8_TOP / top
        rest = w * scale
        for t in range(C.I8_TERMS):
            q = np.floor(rest + 0.5)
            np.testing.assert_array_equal(w8[t * k + c], q.astype(np.int8))
            rest = (rest - q) * C.I8_BASE
        assert colinfo[c] == step[0] / scale
        assert colinfo[k + c] == pytest.approx(step[0] * C.I8_SHIFT * w.sum() + b[c], rel=1e-12,
                                               abs=1e-12)
    assert not w8[[t * k + 1 for t in range(C.I8_TERMS)]].any()  # the zero column
