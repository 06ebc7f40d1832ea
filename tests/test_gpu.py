"""GPU tests: real CUDA kernels, CuPy shards on LocalCUDACluster (skipped without a GPU)."""

from __future__ import annotations

import os

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")

from mgpu_dask.config.environment import has_gpu  # noqa: E402
from mgpu_dask.parallel.workers import scheduler_workers  # noqa: E402

if not has_gpu() or os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
    pytest.skip("needs a CUDA GPU (not the simulator)", allow_module_level=True)

from numba import cuda  # noqa: E402

from mgpu_dask.kernels import knn as K  # noqa: E402


def _exact(Q, T):
    return ((Q[:, None, :].astype(np.float64) - T[None].astype(np.float64)) ** 2).sum(-1)


@pytest.mark.parametrize("n, d", [(0, 784), (1, 5), (13, 784), (1001, 33)])
def test_pixel_row_norms_are_exact(n, d):
    """The squared norms of shifted pixels (one warp per row): the int64 sums, as float64,
    for row counts that do not fill the last block and widths that do not fill a warp;
    a non-contiguous view too."""
    from mgpu_dask.kernels.knn.operands import squared_norms

    rng = np.random.default_rng(n + d)
    X = rng.integers(0, 256, (n, d + 3)).astype(np.uint8)
    ref = ((X[:, :d].astype(np.int64) - 128) ** 2).sum(axis=1).astype(np.float64)
    got = squared_norms(cupy, cupy.asarray(X)[:, :d], True, 128)
    assert got.dtype == np.float64 and got.shape == (n,)
    np.testing.assert_array_equal(cupy.asnumpy(got), ref)


@pytest.mark.parametrize("precision", ["int8", "bf16", "tf32", "fp32"])
def test_tensor_core_products_of_pixels_are_exact(precision):
    """The real tensor cores: every tile product of shifted pixels equals the int64 one."""
    from mgpu_dask.kernels.knn.operands import prepare_queries, prepare_train
    from mgpu_dask.kernels.knn.product import TileProduct

    rng = np.random.default_rng()
    Q = rng.integers(0, 256, (300, 784)).astype(np.uint8)
    T = rng.integers(0, 256, (1500, 784)).astype(np.uint8)
    train = prepare_train(cupy.asarray(T), precision, True, 128)
    queries = prepare_queries(cupy.asarray(Q), train)
    product = TileProduct(queries.operand, train, 304 * 1504)
    G = cupy.asnumpy(product(0, 304, 0, 1504)[:304 * 1504]).reshape(304, 1504)[:300, :1500]
    ref = (Q.astype(np.int64) - 128) @ (T.astype(np.int64) - 128).T
    np.testing.assert_array_equal(G.astype(np.int64), ref)


@pytest.mark.parametrize("precision", ["int8", "bf16", "tf32", "fp32"])
def test_local_candidates_on_gpu_equal_cpu_and_reference(precision):
    from mgpu_dask.kernels.knn.operands import prepare_train

    rng = np.random.default_rng()
    Q = rng.integers(0, 256, (700, 80)).astype(np.uint8)
    T = rng.integers(0, 24, (5000, 80)).astype(np.uint8)  # few levels: many ties
    y = rng.integers(0, 7, 5000).astype(np.int32)
    ref = _exact(Q, T)
    order = np.argsort(ref, axis=1, kind="stable")[:, :5]
    index = np.arange(5000, dtype=np.int64)
    for method in ("gemm", "direct"):
        gpu_train = prepare_train(cupy.asarray(T), precision, True, 128, method)
        cand = cupy.asnumpy(K.local_candidates(cupy.asarray(Q), gpu_train, cupy.asarray(y),
                                               cupy.asarray(index), 5, tile_bytes=1 << 20))
        np.testing.assert_array_equal(cand[..., 1], order)
        # the euclidean distance: the square root of the exact integer, correctly rounded
        np.testing.assert_array_equal(cand[..., 0], np.sqrt(np.take_along_axis(ref, order, 1)))
        cpu = K.local_candidates(Q, prepare_train(T, precision, True, 128, method), y, index, 5)
        np.testing.assert_array_equal(cand, cpu)
        for weights in ("distance", "uniform"):
            gp, gpred = K.vote(cupy.asarray(cand), 7, weights)
            cp_, cpred = K.vote(cpu, 7, weights)
            np.testing.assert_array_equal(cupy.asnumpy(gpred), cpred)
            np.testing.assert_allclose(cupy.asnumpy(gp), cp_, rtol=1e-12)


@pytest.mark.parametrize("precision", ["bf16", "tf32", "fp32"])
def test_float_data_on_gpu_are_certified_exact(precision):
    from mgpu_dask.kernels.knn.operands import prepare_train

    rng = np.random.default_rng()
    Q = rng.standard_normal((500, 96)).astype(np.float32)
    T = rng.standard_normal((6000, 96)).astype(np.float32)
    y = rng.integers(0, 7, 6000).astype(np.int32)
    ref = _exact(Q, T)
    order = np.argsort(ref, axis=1, kind="stable")[:, :3]
    stats: dict = {}
    cand = cupy.asnumpy(K.local_candidates(
        cupy.asarray(Q), prepare_train(cupy.asarray(T), precision, False, 0), cupy.asarray(y),
        cupy.arange(6000, dtype=cupy.int64), 3, stats=stats))
    np.testing.assert_array_equal(cand[..., 1], order)
    np.testing.assert_allclose(cand[..., 0], np.sqrt(np.take_along_axis(ref, order, 1)),
                               rtol=1e-12)
    # Rare: tensor cores' truncating float32 sums leave more rows uncertified than the
    # CPU emulation does (20-35 of these 500 there; about 50 on an H100, at times more).
    assert stats["rows_recomputed"] < 0.15 * len(Q)


def test_local_cuda_cluster_shards_and_knn_match_cpu():
    from mgpu_dask.cluster import connect
    from mgpu_dask.data import load_dataset, shard, shard_locations, split
    from mgpu_dask.knn import KNeighborsClassifier
    from mgpu_dask.parallel.inputs import to_host

    ds = load_dataset("digits")
    s = split(ds.X, ds.y)
    cpu = KNeighborsClassifier(3).fit(s.X_train, s.y_train).predict(s.X_test.astype(np.float32))
    cpu = to_host(cpu)
    with connect(device="gpu", dashboard_address=":0") as rc:
        client = rc.client
        n = len(scheduler_workers(client))
        Q = shard(s.X_test, client)
        assert type(Q._meta).__module__.startswith("cupy")
        where = shard_locations(Q, client)
        assert len(where) == n and all(w.array_type == "cupy.ndarray" for w in where)
        assert len({w.worker for w in where}) == n and len({w.device for w in where}) == n
        for plan in ("replicate", "shard"):
            clf = KNeighborsClassifier(3, plan=plan).fit(s.X_train, s.y_train)
            pred = clf.predict(Q)
            assert type(pred._meta).__module__.startswith("cupy")
            np.testing.assert_array_equal(to_host(pred), cpu)


_NO_CONTEXT_SCRIPT = '''
import os, numpy as np
from mgpu_dask.cluster import connect
from mgpu_dask.data import load_dataset, shard, split
from mgpu_dask.knn import KNeighborsClassifier
ds = load_dataset("digits"); s = split(ds.X, ds.y)
def client_has_context():
    import pynvml
    pynvml.nvmlInit()
    pids = set()
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        pids |= {p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)}
    pynvml.nvmlShutdown()
    return len(pids), os.getpid() in pids
with connect(device="gpu", dashboard_address=":0") as rc:
    print("AFTER_START", *client_has_context())
    Q = shard(s.X_test, rc.client, dtype=np.float32)
    clf = KNeighborsClassifier(3).fit(s.X_train, s.y_train)
    pred = clf.predict(Q).persist()
    import distributed; distributed.wait(pred)
    from mgpu_dask.parallel.inputs import to_host
    assert len(to_host(pred)) == len(s.X_test)
    print("AFTER_PREDICT", *client_has_context())
'''


def test_client_process_creates_no_cuda_context():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _NO_CONTEXT_SCRIPT], capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    print(proc.stdout)
    lines = dict(x.split(" ", 1) for x in proc.stdout.splitlines() if x.startswith("AFTER_"))
    # No context in the client when the workers start (dask-cuda's pitfall) ...
    assert lines["AFTER_START"].split()[1] == "False", lines
    # Afterwards the client may hold one (CuPy ``_meta`` objects are built there); the
    # workers must all have theirs.
    assert int(lines["AFTER_PREDICT"].split()[0]) >= int(lines["AFTER_START"].split()[0]), lines


def test_logreg_loss_grad_gpu_matches_cpu():
    from mgpu_dask.kernels import logreg as L

    rng = np.random.default_rng()
    X = rng.random((3000, 50)).astype(np.float32)
    y = rng.integers(0, 10, 3000).astype(np.int32)
    W = rng.standard_normal((50, 10)) * 0.1
    b = rng.standard_normal(10) * 0.1
    gpu = L.loss_grad(cupy.asarray(X), cupy.asarray(y), W, b)
    cpu = L.loss_grad(X, y, W, b)
    assert abs(gpu[0] - cpu[0]) / cpu[0] < 1e-5
    np.testing.assert_allclose(gpu[1], cpu[1], rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(gpu[2], cpu[2], rtol=1e-3, atol=1e-3)


def test_cupy_backend_matches_numba_on_gpu():
    from mgpu_dask.jobs import compare_job

    result = compare_job("knn", ["numba", "cupy"], dataset="digits",
                         options={"k": 3, "weights": "distance", "repeats": 1},
                         cluster_options={"device": "gpu", "dashboard_address": ":0"})
    rows = {r["backend"]: r for r in result["backends"]}
    assert rows["cupy"]["status"] == "ok", rows["cupy"]
    assert abs(rows["cupy"]["accuracy"] - rows["numba"]["accuracy"]) < 0.005


@pytest.mark.parametrize("n, d, k, precision", [(3001, 150, 20, "fp32"), (60000, 784, 10, "fp32"),
                                                (60000, 784, 10, "bf16"), (3001, 150, 20, "bf16"),
                                                (5, 1000, 3, "bf16"), (60000, 784, 10, "int8"),
                                                (3001, 150, 20, "int8"), (5, 1000, 3, "int8"),
                                                (40000, 31, 7, "int8")])
def test_shard_objective_matches_float64_numpy_at_changing_points(n, d, k, precision):
    """Every evaluation queued on every GPU, then collected, against float64 NumPy.

    Changing points and large shards: an operation that ran out of order on
    its stream would show as a wrong loss or gradient here.
    """
    from conftest import softmax_reference

    from mgpu_dask.kernels import logreg as L

    rng = np.random.default_rng()
    X = rng.random((n, d)).astype(np.float32)
    if precision in ("bf16", "int8"):  # 8-bit levels: pixels / 255
        X = rng.integers(0, 256, (n, d)).astype(np.float32) * np.float32(1 / 255)
    y = rng.integers(0, k, n).astype(np.int32)
    objectives = []
    for device in range(cupy.cuda.runtime.getDeviceCount()):
        with cupy.cuda.Device(device):
            objectives.append(L.ShardObjective(cupy.asarray(X), cupy.asarray(y), k, precision,
                                               strict=True))
    assert {o.precision for o in objectives} == {precision}
    X64 = X.astype(np.float64)
    for _ in range(4):
        W, b = rng.standard_normal((d, k)) * 0.05, rng.standard_normal(k)
        for o in objectives:
            o.launch(W, b)
        resid, row_loss = softmax_reference(X64 @ W + b, y)
        loss, gW, gb = row_loss.sum(), X64.T @ resid, resid.sum(0)
        for o in objectives:
            got = o.collect()
            assert abs(got[0] - loss) / loss < 1e-5
            np.testing.assert_allclose(got[1], gW, rtol=1e-3, atol=2e-3 * np.abs(gW).max())
            np.testing.assert_allclose(got[2], gb, rtol=1e-3, atol=1e-3 * np.abs(gb).max())


@pytest.mark.parametrize("precision, wanted", [("auto", "int8"), ("int8", "int8"),
                                               ("bf16", "bf16")])
def test_shard_objective_takes_tensor_cores_for_levels_only(precision, wanted):
    """``auto`` (int8), ``int8`` and ``bf16``: tensor cores for pixels / 255 (same loss and
    gradient as float32 cuBLAS to float32's accuracy), float32 for other rows, saying why
    where a precision was asked for; ``strict`` refuses other rows."""
    from mgpu_dask.kernels import logreg as L
    from mgpu_dask.kernels.logreg import int8 as logreg_int8

    rng = np.random.default_rng()
    n = 3 * logreg_int8.GRADIENT_ROWS + 5  # several int8 row blocks, the last one short
    levels = rng.integers(0, 256, (n, 784)).astype(np.float32) * np.float32(1 / 255)
    y = cupy.asarray(rng.integers(0, 10, n).astype(np.int32))
    auto = L.ShardObjective(cupy.asarray(levels), y, 10, precision)
    fp32 = L.ShardObjective(cupy.asarray(levels), y, 10, "fp32")
    assert auto.precision == wanted and auto.fallback is None
    W, b = rng.standard_normal((784, 10)) * 0.05, rng.standard_normal(10)
    got, want = auto(W, b), fp32(W, b)
    assert abs(got[0] - want[0]) / want[0] < 1e-6
    np.testing.assert_allclose(got[1], want[1], rtol=0, atol=1e-5 * np.abs(want[1]).max())
    other = cupy.asarray(levels + np.float32(1e-3))
    fallen = L.ShardObjective(other, y, 10, precision)
    assert fallen.precision == "fp32"
    assert (fallen.fallback is None) == (precision == "auto")
    assert precision == "auto" or "8-bit levels" in fallen.fallback
    with pytest.raises(ValueError, match="8-bit levels"):
        L.ShardObjective(other, y, 10, wanted, strict=True)


def test_int8_softmax_for_few_classes_gives_the_wide_kernels_bits(monkeypatch):
    """The int8 evaluation with its softmax for up to I8_LOCAL_K classes ends at the bits of
    the same evaluation with the kernel for any class count, at both forward layouts."""
    from mgpu_dask.kernels import logreg as L
    from mgpu_dask.kernels.logreg import cuda_int8 as C
    from mgpu_dask.kernels.logreg import int8 as logreg_int8

    monkeypatch.setattr(logreg_int8, "FUSED", False)  # the fused kernel: test_logreg_fused
    monkeypatch.setattr(logreg_int8, "ONE_PASS", False)  # and test_logreg_onepass
    rng = np.random.default_rng()
    n = 3 * logreg_int8.GRADIENT_ROWS + 7
    pixels = cupy.asarray(rng.integers(0, 256, (n, 300)).astype(np.uint8))
    y = cupy.asarray(rng.integers(0, 10, n).astype(np.int32))
    W, b = rng.standard_normal((300, 10)) * 0.05, rng.standard_normal(10)
    for rows_out in (n + 1, 1):  # (width x rows) logits, then (rows x width)
        monkeypatch.setattr(logreg_int8, "ROWS_OUT_FROM", rows_out)
        fast = L.ShardObjective(pixels, y, 10, "int8", scale=1 / 255)(W, b)
        monkeypatch.setattr(C, "softmax_xent_i8_for", lambda k: C.softmax_xent_i8_wide)
        wide = L.ShardObjective(pixels, y, 10, "int8", scale=1 / 255)(W, b)
        monkeypatch.setattr(C, "softmax_xent_i8_for", lambda k: C.softmax_xent_i8)
        assert fast[0] == wide[0]
        np.testing.assert_array_equal(fast[1], wide[1])
        np.testing.assert_array_equal(fast[2], wide[2])


@pytest.mark.parametrize("route", ["two kernels", "fused", "one pass"])
def test_int8_evaluations_write_their_sums_without_a_memset(route, monkeypatch):
    """The int8 evaluation writes every entry of its sums (no memset before it): whatever
    the buffer held, the same loss and gradients, on each of its three routes."""
    from mgpu_dask.kernels import logreg as L
    from mgpu_dask.kernels.logreg import int8

    monkeypatch.setattr(int8, "runs_fused", lambda *a: route != "two kernels")
    monkeypatch.setattr(int8, "runs_one_pass", lambda *a: route == "one pass")
    rng = np.random.default_rng(5)
    n, d, k = 3000, 784, 10
    pixels = cupy.asarray(rng.integers(0, 256, (n, d)).astype(np.uint8))
    y = cupy.asarray(rng.integers(0, k, n).astype(np.int32))
    W = rng.normal(0, 0.01, (d, k)).astype(np.float32)
    b = rng.normal(0, 0.1, k).astype(np.float32)
    obj = L.ShardObjective(pixels, y, k, "int8", scale=1 / 255)
    assert obj.sums_written and obj.one_pass == (route == "one pass")
    first = obj(W, b)
    with obj.stream:  # in order with the evaluations, which run on the objective's stream
        obj.sums.fill(np.nan)  # what a memset would have cleared
    again = obj(W, b)
    assert np.isfinite(again[0]) and again[0] == first[0]
    np.testing.assert_array_equal(again[1], first[1])
    np.testing.assert_array_equal(again[2], first[2])
    fp32 = L.ShardObjective(pixels, y, k, "fp32", scale=1 / 255)
    assert not fp32.sums_written  # its kernels add into the sums: zeroed each time
    assert abs(fp32(W, b)[0] - first[0]) <= 1e-4 * abs(first[0])


def test_int8_fits_are_reproducible():
    """Two int8 fits on the same rows end at the same bits (the sums that feed the
    coefficient gradient are added in a fixed order, not by atomics, whose varying order
    made repeated fits end apart)."""
    from mgpu_dask.logreg import LogisticRegression

    rng = np.random.default_rng(3)
    n = 20000
    levels = rng.integers(0, 256, (n, 784)).astype(np.float32)
    y = rng.integers(0, 10, n)
    levels[np.arange(n), y * 78] = 255.0  # something to learn
    X = cupy.asarray(levels * np.float32(1 / 255))
    fits = [LogisticRegression(precision="int8", max_iter=40).fit(X, y) for _ in range(3)]
    assert {f.fit_profile_["evaluation"] for f in fits} == {f.precision_ for f in fits} == {"int8"}
    for other in fits[1:]:
        np.testing.assert_array_equal(other.coef_, fits[0].coef_)
        assert other.loss_ == fits[0].loss_


def test_int8_forward_layouts_agree(monkeypatch):
    """The int8 forward product laid out (width x rows) or (rows x width), the layout large
    shards take: the same exact sums, so the same loss and gradient."""
    from mgpu_dask.kernels import logreg as L
    from mgpu_dask.kernels.logreg import int8 as logreg_int8

    monkeypatch.setattr(logreg_int8, "FUSED", False)  # the products cuBLAS lays out
    monkeypatch.setattr(logreg_int8, "ONE_PASS", False)
    rng = np.random.default_rng()
    n = 2 * logreg_int8.GRADIENT_ROWS + 3
    X = cupy.asarray(rng.integers(0, 256, (n, 300)).astype(np.float32) * np.float32(1 / 255))
    y = cupy.asarray(rng.integers(0, 7, n).astype(np.int32))
    W, b = rng.standard_normal((300, 7)) * 0.05, rng.standard_normal(7)
    narrow = L.ShardObjective(X, y, 7, "int8")
    monkeypatch.setattr(logreg_int8, "ROWS_OUT_FROM", 0)
    wide = L.ShardObjective(X, y, 7, "int8")
    assert narrow.logits.shape == wide.logits.shape and not wide.logits.flags.c_contiguous
    got, want = wide(W, b), narrow(W, b)
    assert abs(got[0] - want[0]) <= 1e-12 * want[0]
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6, atol=1e-9 * np.abs(want[1]).max())


def test_shard_objective_on_every_gpu_matches_cpu():
    """One host thread queues an evaluation on each GPU, then collects them all."""
    from mgpu_dask.kernels import logreg as L

    rng = np.random.default_rng()
    X = rng.random((5000, 64)).astype(np.float32)
    y = rng.integers(0, 10, 5000).astype(np.int32)
    objectives = []
    for device in range(cupy.cuda.runtime.getDeviceCount()):
        with cupy.cuda.Device(device):
            objectives.append(L.ShardObjective(cupy.asarray(X), cupy.asarray(y), 10))
    for _ in range(2):  # the buffers are reused: a second point must not see the first
        W, b = rng.standard_normal((64, 10)) * 0.1, rng.standard_normal(10) * 0.1
        for o in objectives:
            o.launch(W, b)
        cpu = L.loss_grad(X, y, W, b)
        for o in objectives:
            loss, gW, gb = o.collect()
            assert abs(loss - cpu[0]) / cpu[0] < 1e-5
            np.testing.assert_allclose(gW, cpu[1], rtol=1e-3, atol=1e-3)
            np.testing.assert_allclose(gb, cpu[2], rtol=1e-3, atol=1e-3)


def test_single_host_logreg_maps_every_gpu_and_matches_actors():
    from conftest import exports_kept, released_with_the_rows

    from mgpu_dask.cluster import connect
    from mgpu_dask.data import load_dataset, shard, split
    from mgpu_dask.parallel.inputs import to_host
    from mgpu_dask.logreg import LogisticRegression

    ds = load_dataset("digits")
    s = split(ds.X, ds.y, seed=1)
    with connect(device="gpu", dashboard_address=":0") as rc, rc.client.as_current():
        X = shard(s.X_train, rc.client, dtype=np.float32, scale=1 / 16)
        one = LogisticRegression(max_iter=200, tol=1e-7, comm="single-host").fit(X, s.y_train)
        msgs = LogisticRegression(max_iter=200, tol=1e-7, comm="actors").fit(X, s.y_train)
        host = LogisticRegression(max_iter=200, tol=1e-7, comm="single-host",
                                  optimizer="host").fit(X, s.y_train)
        assert one.comm_ == "single-host" and one.n_round_trips_ == 1
        n_workers = len(scheduler_workers(rc.client))
        assert exports_kept(rc.client) == [0] + [1] * (n_workers - 1)
        assert one.optimizer_ == "device" and host.optimizer_ == msgs.optimizer_ == "host"
        assert 0 < one.fit_profile_["host syncs"] <= one.n_evaluations_  # iterations run ahead
        assert one.fit_profile_["device seconds, first evaluation"] > 0
        assert abs(one.loss_ - msgs.loss_) / msgs.loss_ < 1e-5
        assert abs(one.loss_ - host.loss_) / host.loss_ < 1e-5
        Xt = shard(s.X_test, rc.client, dtype=np.float32, scale=1 / 16)
        assert abs(one.score(Xt, s.y_test) - msgs.score(Xt, s.y_test)) < 0.01
        on_gpu, on_host = one.predict(Xt), one.predict(Xt, on_host=True)
        assert isinstance(on_gpu._meta, cupy.ndarray) and isinstance(on_host._meta, np.ndarray)
        blocks = rc.client.compute(on_host.to_delayed().ravel().tolist())
        assert all(isinstance(b, np.ndarray) for b in rc.client.gather(blocks))
        np.testing.assert_array_equal(to_host(on_host), to_host(on_gpu))
        del X, Xt, on_gpu, on_host, blocks
        assert released_with_the_rows(rc.client)


def test_device_lbfgs_over_every_gpu_follows_the_host_loop():
    """Shards on every GPU, the optimiser's state on GPU 0: the host loop's objective.

    Parameters reach the other GPUs and partial gradients come back by peer
    copies ordered by events only; a copy out of order would show as a
    different path here.
    """
    from mgpu_dask.logreg.lbfgs import loop as lbfgs
    from mgpu_dask.logreg.lbfgs.device import DeviceBackend
    from mgpu_dask.kernels import logreg as L

    rng = np.random.default_rng(3)
    n, d, k = 24000, 120, 10
    X = rng.random((n, d)).astype(np.float32)
    y = (X @ rng.standard_normal((d, k)) + rng.standard_normal((n, k))).argmax(1).astype(np.int32)
    shards, _ = _over_gpus(X, y)
    penalty = 1.0 / n
    with cupy.cuda.Device(0):
        backend = DeviceBackend(shards, k, n, penalty)
        got = lbfgs.run(backend, maxiter=60, gtol=1e-6)
        per_eval = backend.first_evaluation_seconds()
    objectives = [L.ShardObjective(Xs, ys, k) for Xs, ys in shards]

    def fun(theta):
        W, b = theta[: d * k].reshape(d, k), theta[d * k:]
        parts = [o(W, b) for o in objectives]
        loss, gW, gb = (sum(p[i] for p in parts) for i in range(3))
        return (loss / n + 0.5 * penalty * (W * W).sum(),
                np.concatenate([(gW / n + penalty * W).ravel(), gb / n]))

    want = lbfgs.minimize_lbfgs(fun, np.zeros(d * k + k), maxiter=60, gtol=1e-6)
    assert abs(got["fun"] - want["fun"]) <= 1e-6 * want["fun"]
    assert abs(got["nit"] - want["nit"]) <= 2 and got["nfev"] <= got["nit"] + 10
    assert 0 < per_eval < 0.05


def test_a_kept_device_lbfgs_evaluates_no_first_touch_again():
    """A fit's first evaluation at zero, not counted, lets the kernels touch rows that no
    evaluation has read yet (CUDA IPC mappings are slow the first time); a kept backend
    taken up again (``reuse``) has read them: its fit makes no such evaluation."""
    from mgpu_dask.logreg.lbfgs import loop as lbfgs
    from mgpu_dask.logreg.lbfgs.device import DeviceBackend

    rng = np.random.default_rng(5)
    n, d, k = 20000, 40, 5
    X = rng.standard_normal((n, d)).astype(np.float32)
    y = (X @ rng.standard_normal((d, k))).argmax(1).astype(np.int32)
    shards, _ = _over_gpus(X, y)
    with cupy.cuda.Device(0):
        backend = DeviceBackend(shards, k, n, 1.0 / n)
        calls, real = [], backend._evaluate
        backend._evaluate = lambda counted=True: calls.append(counted) or real(counted)
        first = lbfgs.run(backend, maxiter=20, gtol=1e-6)
        assert calls[0] is False  # the first touch, before the counted evaluation at zero
        calls.clear()
        assert backend.reuse(shards)
        again = lbfgs.run(backend, maxiter=20, gtol=1e-6)
        backend.close()
    assert calls and False not in calls
    assert (again["nit"], again["nfev"]) == (first["nit"], first["nfev"])
    np.testing.assert_allclose(again["x"], first["x"], rtol=1e-6, atol=1e-8)


def _level_shards(n: int, d: int, k: int, seed: int) -> tuple[list, int]:
    """Rows of 8-bit levels / 255 with something to learn, split over every GPU."""
    rng = np.random.default_rng(seed)
    levels = rng.integers(0, 256, (n, d)).astype(np.float32)
    y = rng.integers(0, k, n).astype(np.int32)
    levels[np.arange(n), y * (d // k)] = 255.0
    return _over_gpus(levels * np.float32(1 / 255), y)


def _over_gpus(X: np.ndarray, y: np.ndarray) -> tuple[list, int]:
    """Rows and labels in equal parts, one on each GPU (CuPy); the GPU count."""
    devices = cupy.cuda.runtime.getDeviceCount()
    cuts = np.linspace(0, len(X), devices + 1).astype(int)
    shards = []
    for i in range(devices):
        with cupy.cuda.Device(i):
            shards.append((cupy.asarray(X[cuts[i]:cuts[i + 1]]),
                           cupy.asarray(y[cuts[i]:cuts[i + 1]])))
    return shards, devices


def test_device_lbfgs_graph_gives_the_launches_bits():
    """An iteration captured once as a CUDA graph over every GPU, replayed per
    iteration, ends at the same bits as the same launches issued one by one (int8
    products: no atomics); capture must work here, not fall back."""
    from mgpu_dask.logreg.lbfgs import loop as lbfgs
    from mgpu_dask.logreg.lbfgs.device import DeviceBackend

    n, k = 30000, 10
    shards, _ = _level_shards(n, 784, k, seed=5)
    got = {}
    for graph in (True, False):
        with cupy.cuda.Device(0):
            backend = DeviceBackend(shards, k, n, 1.0 / n, precision="int8", graph=graph)
            got[graph] = lbfgs.run(backend, maxiter=40, gtol=1e-9)
            assert backend.graphed == graph, backend.graph_note
            assert {o.precision for o in backend.objectives} == {"int8"}
            backend.close()
    np.testing.assert_array_equal(got[True]["x"], got[False]["x"])
    assert got[True]["nfev"] == got[False]["nfev"] and got[True]["nit"] == 40


def test_an_objective_in_place_gives_the_copies_bits():
    """An int8 evaluation that reads the parameters and writes its gradient and sums in the
    caller's buffers (on GPU 0, the shard on the last GPU: peer reads and writes where
    there are two) gives the bits of one that copies them in and out."""
    from mgpu_dask.kernels import logreg as L
    from mgpu_dask.kernels import peers

    n, d, k = 20001, 300, 7
    shards, devices = _level_shards(n, d, k, seed=4)
    X, y = shards[-1]
    rng = np.random.default_rng(2)
    theta = np.concatenate([rng.standard_normal(d * k) * 0.05, rng.standard_normal(k)])
    with cupy.cuda.Device(0):
        peers.enable(0, [X.device.id])
        params = cupy.asarray(theta, dtype=np.float32)
        slots = [(cupy.full(d * k, np.nan, dtype=np.float32), cupy.full(k + 1, np.nan))
                 for _ in range(2)]
        ready = cupy.cuda.Stream.null.record()
    copying = L.ShardObjective(X, y, k, "int8")
    in_place = L.ShardObjective(X, y, k, "int8", out=(params, *slots[1]))
    assert in_place.in_place and not copying.in_place
    with X.device:
        done = [cupy.cuda.Event(), cupy.cuda.Event()]
    copying.queue_from(params, ready, *slots[0], done[0])
    in_place.queue(ready, done[1])
    for event in done:
        event.synchronize()
    with cupy.cuda.Device(0):
        (g0, s0), (g1, s1) = [(cupy.asnumpy(g), cupy.asnumpy(s)) for g, s in slots]
    assert np.isfinite(g1).all() and np.isfinite(s1).all()
    np.testing.assert_array_equal(g1, g0)
    np.testing.assert_array_equal(s1, s0)
    with pytest.raises(RuntimeError, match="queue"):
        in_place.launch(theta[: d * k].reshape(d, k), theta[d * k:])


def test_levels_made_by_a_holder_evaluate_like_the_rows():
    """Levels converted where the rows live (what a peer exports) give the int8
    evaluation's bits; other methods get the rows back exactly."""
    from mgpu_dask.parallel import peer_views
    from mgpu_dask.kernels import logreg as L
    from mgpu_dask.kernels.logreg import int8 as logreg_int8

    (X, y), *_ = _level_shards(20001, 300, 7, seed=2)[0]
    made = logreg_int8.levels(X, peer_views.dedicated)
    assert made.shape == X.shape and made.v.shape[0] % 16 == 0
    assert made.vt is None  # made by the evaluation that reads it
    np.testing.assert_array_equal(cupy.asnumpy(logreg_int8.transposed(made.v)),
                                  cupy.asnumpy(made.v).T)
    np.testing.assert_array_equal(cupy.asnumpy(made.rows()), cupy.asnumpy(X))
    rng = np.random.default_rng(1)
    W, b = rng.standard_normal((300, 7)) * 0.05, rng.standard_normal(7)
    want = L.ShardObjective(X, y, 7, "int8")(W, b)
    got = L.ShardObjective(made, y, 7, "int8")(W, b)
    assert got[0] == want[0]  # int8: no atomics, the same bits
    np.testing.assert_array_equal(got[1], want[1])
    want = L.ShardObjective(X, y, 7, "fp32")(W, b)  # float32 sums by atomics: nearly
    got = L.ShardObjective(made, y, 7, "fp32")(W, b)
    assert abs(got[0] - want[0]) <= 1e-12 * want[0]
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6 * np.abs(want[1]).max())
    assert logreg_int8.levels(X + np.float32(1e-3)) is None  # not levels: X is exported


def test_shards_joined_on_the_leader_evaluate_like_the_rows_joined_first():
    """Shards that share a GPU are copied into one (levels, or the rows as they are): the
    int8 evaluation gives the bits of the rows joined before their levels were made."""
    from mgpu_dask.kernels import logreg as L
    from mgpu_dask.kernels.logreg import int8 as logreg_int8
    from mgpu_dask.logreg import joined

    rng = np.random.default_rng(3)
    levels = rng.integers(0, 256, (20001, 300)).astype(np.float32)
    levels[:, 0] = 255.0  # every shard's levels of one step
    X, y = cupy.asarray(levels / 255), cupy.asarray(rng.integers(0, 7, 20001).astype(np.int32))
    # three shards on GPU 0; joined, more than one block of GRADIENT_ROWS
    shards = [(X[a:b].copy(), y[a:b].copy()) for a, b in ((0, 7000), (7000, 17001),
                                                         (17001, 20001))]
    made = [(logreg_int8.levels(rows), labels) for rows, labels in shards]
    one, labels = joined.on_leader(made)
    whole = logreg_int8.levels(X)
    np.testing.assert_array_equal(cupy.asnumpy(one.v), cupy.asnumpy(whole.v))
    assert one.vt is None and whole.vt is None
    assert (one.step, one.n, one.d) == (whole.step, whole.n, whole.d)
    rng = np.random.default_rng(2)
    W, b = rng.standard_normal((300, 7)) * 0.05, rng.standard_normal(7)
    got = L.ShardObjective(one, labels, 7, "int8")(W, b)
    want = L.ShardObjective(X, y, 7, "int8")(W, b)
    assert got[0] == want[0]
    np.testing.assert_array_equal(got[1], want[1])
    rows, labels = joined.on_leader(shards)  # float rows: joined as they are
    np.testing.assert_array_equal(cupy.asnumpy(rows), cupy.asnumpy(X))
    assert joined.on_leader(shards[:1]) is None  # one shard: nothing to join


@pytest.mark.parametrize("precision", ["int8", "bf16", "fp32"])
def test_uint8_rows_evaluate_like_their_scaled_float_copy(precision):
    """uint8 rows with a scale are their own levels (int8 and bf16 take them as they are;
    no pass decides whether they are levels) and the same objective as float32 rows
    scaled beforehand: int8 to the bit, the others to float32's sums; uint8 rows whose
    largest value is below 255 (digits: 0..16) are levels all the same."""
    from mgpu_dask.kernels import logreg as L

    rng = np.random.default_rng()
    n, d, k = 40001, 300, 7
    pixels = rng.integers(0, 256, (n, d)).astype(np.uint8)
    y = cupy.asarray(rng.integers(0, k, n).astype(np.int32))
    W, b = rng.standard_normal((d, k)) * 0.05, rng.standard_normal(k)
    scaled = cupy.asarray(pixels.astype(np.float32) * np.float32(1 / 255))
    eight = L.ShardObjective(cupy.asarray(pixels), y, k, precision, scale=1 / 255)
    assert eight.precision == precision
    got, want = eight(W, b), L.ShardObjective(scaled, y, k, precision)(W, b)
    if precision == "int8":
        assert got[0] == want[0]
        np.testing.assert_array_equal(got[1], want[1])
    else:
        assert abs(got[0] - want[0]) <= 1e-6 * want[0]
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5 * np.abs(want[1]).max())
    low = cupy.asarray(pixels // 16)  # 0..15: levels of step 1 / 15 as uint8
    assert L.ShardObjective(low, y, k, "auto", scale=1 / 15).precision == "int8"


def test_single_host_fit_keeps_uint8_rows_and_matches_float32_rows():
    """uint8 shards with input_scale: the holders make int8 levels from the bytes on their
    GPU (no float32 copy anywhere), and the fit ends at the bits of the same rows given
    as float32 / 255; --precision fp32 on the same uint8 rows reads them as float32."""
    from mgpu_dask.cluster import connect
    from mgpu_dask.data import shard
    from mgpu_dask.logreg import LogisticRegression

    rng = np.random.default_rng(11)
    n, d, k = 24000, 784, 10
    pixels = rng.integers(0, 256, (n, d)).astype(np.uint8)
    y = rng.integers(0, k, n)
    pixels[np.arange(n), y * (d // k)] = 255
    with connect(device="gpu", dashboard_address=":0") as rc, rc.client.as_current():
        X8 = shard(pixels, rc.client)
        X32 = shard(pixels, rc.client, dtype=np.float32, scale=1 / 255)
        assert X8.dtype == np.uint8 and type(X8._meta).__module__.startswith("cupy")
        fits = {}
        for name, X, scale, precision in (("u8", X8, 1 / 255, "auto"), ("f32", X32, None, "auto"),
                                          ("u8 fp32", X8, 1 / 255, "fp32"),
                                          ("f32 fp32", X32, None, "fp32")):
            fits[name] = LogisticRegression(max_iter=30, input_scale=scale,
                                            precision=precision).fit(X, y)
            assert fits[name].comm_ == "single-host"
        assert fits["u8"].fit_profile_["evaluation"] == "int8"
        np.testing.assert_array_equal(fits["u8"].coef_, fits["f32"].coef_)
        assert fits["u8 fp32"].precision_ == "fp32"  # in one pass on the tensor cores
        assert fits["u8 fp32"].fit_profile_["evaluation"].startswith("fp32")
        assert abs(fits["u8 fp32"].loss_ - fits["f32 fp32"].loss_) <= 1e-5 * fits["f32 fp32"].loss_
        np.testing.assert_array_equal(cupy.asnumpy(fits["u8"].predict(X8).compute()),
                                      cupy.asnumpy(fits["f32"].predict(X32).compute()))


@pytest.mark.parametrize("odd", [False, True])
def test_labels_beside_their_rows_on_the_gpus_fit_the_bits_of_host_labels(odd):
    """CuPy label blocks beside uint8 rows: the leader finds the classes (CuPy counts
    on each GPU) and encodes them where they live (labels 1, 3, ..., 19 through a table
    on the GPU); the int8 fit ends at the bits of the same labels sent from the client."""
    from conftest import exports_kept, released_with_the_rows

    from mgpu_dask.cluster import connect
    from mgpu_dask.data import shard
    from mgpu_dask.logreg import LogisticRegression

    rng = np.random.default_rng(5)
    n, d, k = 20000, 784, 10
    pixels = rng.integers(0, 256, (n, d)).astype(np.uint8)
    y = rng.integers(0, k, n).astype(np.uint8)
    pixels[np.arange(n), y.astype(int) * (d // k)] = 255
    if odd:
        y = 2 * y + 1
    with connect(device="gpu", dashboard_address=":0") as rc, rc.client.as_current():
        X = shard(pixels, rc.client)
        held = shard(y, rc.client, like=X)
        assert type(held._meta).__module__.startswith("cupy")
        ref = LogisticRegression(max_iter=30, input_scale=1 / 255).fit(X, y)
        ours = LogisticRegression(max_iter=30, input_scale=1 / 255).fit(X, held)
        assert ours.comm_ == "single-host" and ours.fit_profile_["evaluation"] == "int8"
        np.testing.assert_array_equal(ours.classes_, np.unique(y))
        np.testing.assert_array_equal(ours.coef_, ref.coef_)
        n_workers = len(scheduler_workers(rc.client))
        assert exports_kept(rc.client) == [0] + [1] * (n_workers - 1)
        del X, held
        assert released_with_the_rows(rc.client)


def test_single_host_int8_fit_maps_the_holders_levels():
    """Every GPU's worker converts its own rows and exports the levels; the leader fits on
    them (int8 evaluations); the holders keep their exports for the leader's next fit and
    release them when the rows go."""
    from conftest import exports_kept, released_with_the_rows

    from mgpu_dask.cluster import connect
    from mgpu_dask.data import shard
    from mgpu_dask.logreg import LogisticRegression

    shards, _ = _level_shards(24000, 784, 10, seed=7)
    X = np.concatenate([cupy.asnumpy(s[0]) for s in shards])
    y = np.concatenate([cupy.asnumpy(s[1]) for s in shards])
    # Strongly regularised and run to a tight tolerance, so both fits end at the optimum:
    # unconverged fits over differently split shards part ways (float64 sums in another
    # order, amplified by the iterations).  The int8 values are float64-exact: had the
    # step test taken them for float32's, two GPUs' fit would stop 6.6e-5 above it.
    local = LogisticRegression(C=0.01, max_iter=1000, tol=1e-9).fit(cupy.asarray(X), y)
    with connect(device="gpu", dashboard_address=":0") as rc, rc.client.as_current():
        Xd = shard(X, rc.client, dtype=np.float32)
        fit = LogisticRegression(C=0.01, max_iter=1000, tol=1e-9).fit(Xd, y)
        assert fit.comm_ == "single-host" and fit.n_round_trips_ == 1
        assert fit.fit_profile_["evaluation"] == "int8"
        n_workers = len(scheduler_workers(rc.client))
        assert fit.fit_profile_["shards"] == n_workers
        assert exports_kept(rc.client) == [0] + [1] * (n_workers - 1)
        del Xd
        assert released_with_the_rows(rc.client)
    assert abs(fit.loss_ - local.loss_) <= 1e-6 * local.loss_, (
        fit.stop_reason_, fit.n_iter_, local.stop_reason_, local.n_iter_)


def test_device_lbfgs_without_a_client_matches_host():
    from mgpu_dask.data import load_dataset
    from mgpu_dask.logreg import LogisticRegression

    ds = load_dataset("digits")
    X = cupy.asarray(ds.X / 16.0, dtype=cupy.float32)
    # Converged further than tol=1e-6, where the two loops' stopping points differed by
    # 1.5e-6 of the loss (float32 products whose sums are added in any order).
    dev = LogisticRegression(max_iter=1000, tol=1e-8).fit(X, ds.y)
    host = LogisticRegression(max_iter=1000, tol=1e-8, optimizer="host").fit(X, ds.y)
    assert dev.optimizer_ == "device" and host.optimizer_ == "host"
    assert abs(dev.loss_ - host.loss_) <= 1e-6 * host.loss_


@pytest.mark.parametrize("method", ["gemm", "direct"])
def test_small_launches_raise_no_performance_warning(method):
    """Our launches configure small grids on purpose; Numba's occupancy warning stays silent."""
    import warnings

    from numba.core.errors import NumbaPerformanceWarning

    from mgpu_dask.kernels.knn.operands import prepare_train

    rng = np.random.default_rng(1)
    Q = cupy.asarray(rng.standard_normal((9, 16)).astype(np.float32))
    T = cupy.asarray(rng.standard_normal((40, 16)).astype(np.float32))
    y = cupy.asarray(rng.integers(0, 3, 40).astype(np.int32))
    with warnings.catch_warnings():
        warnings.simplefilter("error", NumbaPerformanceWarning)
        train = prepare_train(T, "fp32", False, 0, method)
        cand = K.local_candidates(Q, train, y, cupy.arange(40, dtype=cupy.int64), 3)
        K.vote(K.merge(cand, cand), 3, "distance")
        K.refine(Q, T, cupy.zeros((9, 4), dtype=cupy.int32), 2)


def test_direct_launches_give_numbas_own_launches_bits():
    """Kernels launched through the driver (``launch._launched``) write what Numba's own
    launch writes, for array, bool, int and float parameters on a stream of CuPy's."""
    from mgpu_dask.kernels import launch as L
    from mgpu_dask.kernels.knn import cuda as KC

    rng = np.random.default_rng(5)
    m = 700
    cand = np.empty((m, 5, 3))
    cand[..., 0] = np.sort(rng.integers(0, 30, (m, 5)), axis=1)  # exact matches and ties
    cand[..., 1] = rng.permutation(m * 5).reshape(m, 5)
    cand[..., 2] = rng.integers(0, 4, (m, 5))
    other = cand.copy()
    other[..., 0] = np.sort(rng.integers(0, 30, (m, 5)), axis=1)
    a, b = cupy.asarray(cand), cupy.asarray(other)
    with cupy.cuda.Stream(non_blocking=True) as stream:
        for uniform in (False, True):
            outs = []
            for direct in (True, False):
                proba, pred = cupy.zeros((m, 4)), cupy.zeros(m, np.int32)
                if direct:
                    L.launch(KC.vote_rows, *L.thread_grid(m), a, 4, uniform, proba, pred)
                else:
                    KC.vote_rows[(*L.thread_grid(m), cuda.external_stream(stream.ptr))](
                        a, 4, uniform, proba, pred)
                outs.append((proba.get(), pred.get()))
            np.testing.assert_array_equal(outs[0][0], outs[1][0])
            np.testing.assert_array_equal(outs[0][1], outs[1][1])
        merged = [cupy.empty_like(a), cupy.empty_like(a)]
        L.launch(KC.merge_pairs, *L.thread_grid(m), a, b, merged[0])
        KC.merge_pairs[(*L.thread_grid(m), cuda.external_stream(stream.ptr))](a, b, merged[1])
        np.testing.assert_array_equal(merged[0].get(), merged[1].get())
        for flag in (False, True):
            x, out = cupy.asarray(rng.standard_normal(m)), [cupy.zeros(m), cupy.zeros(m)]
            L.launch(_scalars, *L.thread_grid(m), x, 0.37, np.float32(1.25), flag, m - 3,
                     np.int32(-2), out[0])
            _scalars[(*L.thread_grid(m), cuda.external_stream(stream.ptr))](
                x, 0.37, np.float32(1.25), flag, m - 3, np.int32(-2), out[1])
            np.testing.assert_array_equal(out[0].get(), out[1].get())
    assert not {KC.vote_rows, KC.merge_pairs, _scalars} & L._NUMBA_LAUNCH
    assert {KC.vote_rows, KC.merge_pairs, _scalars} <= {key[0] for key in L._FUNCTIONS}


@cuda.jit
def _scalars(x, a, b, flag, n, shift, out):
    """A kernel of every scalar kind our kernels take: float64, float32, bool, int64, int32."""
    i = cuda.grid(1)
    if i < n:
        out[i] = x[i] * a + b if flag else x[i] - n + shift


@pytest.mark.parametrize("Est", ["knn", "logreg"])
def test_sklearn_api_with_cupy_inputs(Est):
    """CuPy in, CuPy out, with and without a LocalCUDACluster; scikit-learn's errors."""
    from mgpu_dask.cluster import connect
    from mgpu_dask.parallel.inputs import NotFittedError
    from mgpu_dask.knn import KNeighborsClassifier
    from mgpu_dask.logreg import LogisticRegression

    make = {"knn": lambda: KNeighborsClassifier(3), "logreg": lambda: LogisticRegression()}[Est]
    rng = np.random.default_rng(0)
    centers = rng.normal(0, 4, (4, 16))
    y = rng.integers(0, 4, 800)
    X = (centers[y] + rng.normal(0, 1.5, (800, 16))).astype(np.float32)
    expected = make().fit(X[:600], y[:600]).predict(X[600:])
    Xg, yg = cupy.asarray(X), cupy.asarray(y)
    with pytest.raises(NotFittedError):
        make().predict(Xg)
    local = make().fit(Xg[:600], yg[:600])
    out = local.predict(Xg[600:])
    assert isinstance(out, cupy.ndarray)
    np.testing.assert_array_equal(out.get(), expected)
    assert isinstance(local.predict_proba(Xg[600:]), cupy.ndarray)
    with pytest.raises(ValueError, match="X has 15 features, but"):
        local.predict(Xg[600:, :15])
    bad = Xg[:600].copy()
    bad[3, 2] = cupy.nan
    with pytest.raises(ValueError, match="NaN"):
        make().fit(bad, yg[:600])
    names = np.array(["ant", "bee", "cat", "dog"])
    with connect(device="gpu", dashboard_address=":0") as rc:
        import dask.array as da

        from mgpu_dask.data import shard

        on_workers = make().fit(Xg[:600], yg[:600])
        np.testing.assert_array_equal(on_workers.predict(Xg[600:]).get(), expected)
        Q = shard(X[600:], rc.client)
        lazy = on_workers.predict(Q)
        assert isinstance(lazy, da.Array) and type(lazy._meta).__module__.startswith("cupy")
        np.testing.assert_array_equal(cupy.asnumpy(lazy.compute()), expected)
        labelled = make().fit(Xg[:600], names[y[:600]])
        np.testing.assert_array_equal(labelled.predict(Xg[600:]), names[expected])


def test_cuda_c_knn_kernels_find_the_exact_neighbours():
    """knn_c.cu on the GPU: the k nearest by exact distance (ties to the smaller training
    row) across several training tiles, and the vote of cupy_backend's reference."""
    from mgpu_dask.compare.cupy import vote
    from mgpu_dask.compare.cuda_c import kernels as cuda_c

    rng = np.random.default_rng(0)
    T = rng.integers(0, 4, (3000, 20)).astype(np.float32)  # small integers: many equal distances
    Q = rng.integers(0, 4, (257, 20)).astype(np.float32)
    Q[5] = T[17]  # an exact match takes the distance-weighted vote
    labels = rng.integers(0, 7, 3000).astype(np.int32)
    Tg, Qg = cupy.asarray(T), cupy.asarray(Q)
    k = 5
    norms = (Tg * Tg).sum(1)
    keys, cols = cuda_c.candidates(Qg, Tg, norms, 3000, k + cuda_c.REFINE_MARGIN,
                                   tile_bytes=4 * 257 * 512)  # 512 rows per tile: 6 tiles
    np.testing.assert_array_equal(  # integer keys, exact: what the columns say
        keys.get(), (norms.get()[cols.get()] - 2.0 * np.einsum("md,mkd->mk", Q, T[cols.get()])))
    sq, rows = cuda_c.refine(Qg, Tg, cols, 20, k)
    exact = _exact(Q, T)
    want = np.argsort(exact, axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(rows.get(), want)
    np.testing.assert_array_equal(sq.get(), np.take_along_axis(exact, want, axis=1))
    for weights in ("distance", "uniform"):
        got = cuda_c.vote(sq, rows, cupy.asarray(labels), 7, weights).get()
        ref = vote(np.sqrt(np.take_along_axis(exact, want, axis=1)), labels[want], weights, 7)
        np.testing.assert_array_equal(got, ref)
        if weights == "distance":
            assert got[5] == labels[17]


def test_cuda_c_softmax_matches_float64():
    """logreg_c.cu's loss and gradient against float64 NumPy."""
    from conftest import softmax_reference

    from mgpu_dask.compare.cuda_c import kernels as cuda_c

    rng = np.random.default_rng(1)
    X = rng.random((3001, 40)).astype(np.float32)
    y = rng.integers(0, 10, 3001).astype(np.int32)
    W, b = rng.normal(0, 0.3, (40, 10)), rng.normal(0, 0.3, 10)
    loss, gW, gb = cuda_c.loss_grad(cupy.asarray(X), cupy.asarray(y), W, b)
    X64 = X.astype(np.float64)
    resid, rows = softmax_reference(X64 @ W.astype(np.float32).astype(np.float64)
                                    + b.astype(np.float32), y)
    assert abs(loss - rows.sum()) <= 1e-5 * rows.sum()
    np.testing.assert_allclose(gb, resid.sum(0), rtol=0, atol=1e-4)
    np.testing.assert_allclose(gW, X64.T @ resid, rtol=0, atol=1e-5 * np.abs(X64.T @ resid).max())
