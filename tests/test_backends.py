"""Comparison backends: array-code KNN / logistic regression, the side-by-side table."""

from __future__ import annotations

import functools
import importlib.util
import json

import dask.array as da
import numpy as np
import pytest
from sklearn.neighbors import KNeighborsClassifier as SkKNN

from mgpu_dask.compare import BACKENDS, BackendRun, unavailable
from mgpu_dask.compare import cupy as cupy_backend
from mgpu_dask.parallel.workers import scheduler_workers
from mgpu_dask.data import load_dataset, shard, split
from mgpu_dask.kernels import logreg as L
from mgpu_dask.knn import KNeighborsClassifier
from mgpu_dask.parallel.inputs import to_host
from mgpu_dask.logreg import LogisticRegression
from mgpu_dask.cli import main


@pytest.fixture(scope="module")
def digits():
    ds = load_dataset("digits")
    return split(ds.X, ds.y, seed=7)


@pytest.mark.parametrize("weights, tile_bytes", [("distance", 1 << 30), ("uniform", 1 << 30),
                                                 ("distance", 100_000)])
def test_array_knn_block_matches_sklearn(digits, weights, tile_bytes):
    s = digits
    T = s.X_train.astype(np.float32)
    pred = cupy_backend.knn_block(s.X_test, T, s.y_train.astype(np.int32), (T * T).sum(1), 3,
                                  weights, 10, tile_bytes=tile_bytes)  # 100 kB: 7-row tiles
    sk = SkKNN(3, weights=weights, algorithm="brute").fit(T.astype(np.float64), s.y_train)
    agree = (pred == sk.predict(s.X_test.astype(np.float64))).mean()
    assert agree > 0.99  # only exact ties may differ (argpartition breaks them arbitrarily)


def test_array_loss_grad_matches_numba_kernel():
    rng = np.random.default_rng()
    X = rng.random((400, 30)).astype(np.float32)
    y = rng.integers(0, 5, 400).astype(np.int32)
    W, b = rng.standard_normal((30, 5)) * 0.2, rng.standard_normal(5) * 0.2
    ours, array = L.loss_grad(X, y, W, b), cupy_backend.loss_grad(X, y, W, b)
    assert abs(ours[0] - array[0]) / ours[0] < 1e-5
    np.testing.assert_allclose(ours[1], array[1], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ours[2], array[2], rtol=1e-4, atol=1e-4)


def test_array_backend_through_dask_matches_ours(client, digits):
    """The plain array-code backend on our shards (NumPy on CPU workers): a training copy
    per worker, one task per query shard; its own L-BFGS fit, one task per shard and
    evaluation."""
    s = digits
    Q = shard(s.X_test, client, dtype=np.float32)
    ours = to_host(KNeighborsClassifier(3).fit(s.X_train, s.y_train).predict(Q))
    run = BackendRun(s, client, "cpu", {"k": 3, "weights": "distance", "repeats": 1,
                                        "C": 1.0, "max_iter": 50, "tol": 1e-4}, 60)
    array = cupy_backend.knn(run)
    assert (ours == array["predictions"]).mean() > 0.99
    assert len(array["warm"]) == 1 and array["cold"]["accuracy"] > 0.95
    fitted = cupy_backend.logreg(run)
    assert fitted["cold"]["accuracy"] > 0.9
    X = shard(s.X_train, client, dtype=np.float32, scale=1 / 16)
    reference = LogisticRegression(C=1.0, max_iter=50).fit(X, s.y_train)
    Xt = shard(s.X_test, client, dtype=np.float32, scale=1 / 16)
    assert abs(fitted["cold"]["accuracy"] - reference.score(Xt, s.y_test)) < 0.02


def test_unavailable_reasons():
    assert unavailable("numba", "cpu") is None and unavailable("sklearn", "cpu") is None
    assert "needs GPU workers" in unavailable("cupy", "cpu")
    assert "needs GPU workers" in unavailable("cuml", "cpu")
    assert "unknown backend" in unavailable("jax", "gpu")
    assert "needs GPU workers" in unavailable("cuml-single", "cpu")
    assert "needs GPU workers" in unavailable("cuda-c", "cpu")
    assert "needs GPU workers" in unavailable("cuvs", "cpu")
    assert set(BACKENDS) == {"numba", "cupy", "cuda-c", "cuml", "cuml-single", "cuvs",
                             "faiss", "sklearn", "torch", "torch-script"}
    if importlib.util.find_spec("faiss") is None:
        assert unavailable("faiss", "gpu") == ("FAISS is not installed "
                                               "(pip install 'mgpu-dask[faiss-cu13]')")
    if importlib.util.find_spec("cuvs") is None:
        assert unavailable("cuvs", "gpu") == ("cuVS is not installed "
                                              "(pip install 'mgpu-dask[rapids13]')")
    if importlib.util.find_spec("cuml") is None:
        assert unavailable("cuml-single", "gpu") == ("cuML is not installed "
                                                     "(pip install 'mgpu-dask[rapids13]')")
    for name in ("torch", "torch-script"):
        torch_reason = unavailable(name, "gpu")
        if importlib.util.find_spec("torch") is None:
            assert torch_reason == "PyTorch is not installed (pip install 'mgpu-dask[torch]')"
        else:
            assert torch_reason is None


def test_compare_job_rows(digits, monkeypatch):
    from mgpu_dask.compare import sklearn as sklearn_backend
    from mgpu_dask.jobs import compare_job

    result = compare_job("knn", ["numba", "sklearn", "cupy", "cuml"], dataset="digits",
                         options={"k": 3, "weights": "distance", "repeats": 1},
                         cluster_options={"workers": 2, "device": "cpu",
                                          "dashboard_address": ":0"})
    rows = {r["backend"]: r for r in result["backends"]}
    assert rows["numba"]["status"] == "ok" and rows["sklearn"]["status"] == "ok"
    assert rows["numba"]["accuracy"] == pytest.approx(rows["sklearn"]["accuracy"], abs=0.005)
    assert "needs GPU" in rows["cupy"]["status"] and "needs GPU" in rows["cuml"]["status"]
    assert "speedup_vs_cuml" not in rows["numba"]
    assert rows["numba"]["note"] == "plan replicate, int8 products"  # what ran (8-bit pixels)
    assert rows["numba"]["warm"]["predict"] > 0
    # exact KNN: our predictions are scikit-learn's brute force, test row for test row
    assert rows["numba"]["differ_from_sklearn"] == 0 == rows["sklearn"]["differ_from_sklearn"]
    assert all("predictions" not in r for r in result["backends"])

    def broken(run):
        raise RuntimeError("backend exploded\nsecond line")

    monkeypatch.setattr(sklearn_backend, "knn", broken)
    result = compare_job("knn", ["sklearn"], dataset="digits",
                         options={"k": 3, "weights": "distance", "repeats": 1},
                         cluster_options={"workers": 1, "device": "cpu",
                                          "dashboard_address": ":0"})
    assert result["backends"][0]["status"] == "failed: RuntimeError: backend exploded"


def test_cli_backend_all_table(tmp_path, capsys):
    out = tmp_path / "cmp.json"
    assert main(["logreg", "--dataset", "digits", "--backend", "all", "--workers", "2",
                 "--device", "cpu", "--repeats", "1", "--quiet", "--dashboard-address", ":0",
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "backend      accuracy" in text and "cuml         cuml needs GPU workers" in text
    assert "!=sklearn: test predictions that differ" in text
    rows = json.loads(out.read_text())["backends"]
    n_test = json.loads(out.read_text())["n_test"]
    assert all(0 <= r["differ_from_sklearn"] <= n_test for r in rows if r["status"] == "ok")
    assert next(r for r in rows if r["backend"] == "sklearn")["differ_from_sklearn"] == 0
    assert rows[0]["note"].startswith("fp32 products, single-host fit, L-BFGS on the host")
    assert [r["backend"] for r in rows] == ["numba", "cupy", "cuda-c", "cuml", "cuml-single",
                                            "cuvs", "faiss", "sklearn", "torch", "torch-script"]
    assert "cuda-c needs GPU workers" in text


def test_shared_vote_is_scikit_learns():
    """The vote the cupy and cuml-single backends share, fed scikit-learn's neighbours."""
    from sklearn.datasets import load_digits

    from mgpu_dask.compare.cupy import vote

    X, y = load_digits(return_X_y=True)
    X[1000] = X[0]  # an exact match: it takes the vote
    for weights in ("distance", "uniform"):
        sk = SkKNN(n_neighbors=5, weights=weights).fit(X[:1000], y[:1000])
        dist, nearest = sk.kneighbors(X[1000:])
        got = vote(dist, y[:1000][nearest], weights, 10)
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, sk.predict(X[1000:]))


def _fake_single_gpu_script(task, X, y, Xt, yt, options, repeats):
    """A stand-in framework for the one-worker runner: scikit-learn's KNN, where it runs."""
    from distributed import get_worker

    from mgpu_dask.compare.one_worker import repeat_here

    out = repeat_here(lambda: SkKNN(options["k"]).fit(X, y), lambda m: m.predict(Xt), yt,
                      repeats)
    return {**out, "where": get_worker().address, "dtype": str(X.dtype)}


def test_single_gpu_frameworks_run_on_one_worker(digits):
    """Host rows go to the cluster's first worker, once; cold + warm rows come back."""
    from distributed import Client, LocalCluster

    from mgpu_dask.compare import BackendSkipped
    from mgpu_dask.compare.one_worker import rows_for, run_on_one_worker

    s = digits
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        run = BackendRun(s, client, "cpu", {"k": 3, "repeats": 2}, 60)
        out = run_on_one_worker(run, _fake_single_gpu_script, "knn", *rows_for("knn", run),
                                "a stand-in")
        first = sorted(scheduler_workers(client))[0]
        assert out["where"] == first and out["dtype"] == "float32"
        assert len(out["warm"]) == 2 and out["cold"]["accuracy"] > 0.95
        assert all(r["accuracy"] == out["cold"]["accuracy"] for r in out["warm"])
        X, _ = rows_for("logreg", run)
        assert X.dtype == np.float32 and 0 < X.max() <= 1.0
        on_workers = s._replace(X_train=client.persist(da.from_array(s.X_train)))
        generated = BackendRun(on_workers, client, "cpu", {"repeats": 1}, 60)
        with pytest.raises(BackendSkipped, match="stand-in takes host rows"):
            run_on_one_worker(generated, _fake_single_gpu_script, "knn",
                              *rows_for("knn", generated), "a stand-in")


def _beside_ours(task, backend, cluster_options):
    """``compare_job`` of ``backend`` next to ours on digits: the two rows by name."""
    from mgpu_dask.jobs import compare_job

    options = ({"k": 3, "weights": "distance", "repeats": 1} if task == "knn" else
               {"C": 1.0, "max_iter": 100, "tol": 1e-4, "repeats": 1})
    result = compare_job(task, ["numba", backend], dataset="digits", options=options,
                         cluster_options={**cluster_options, "dashboard_address": ":0"})
    rows = {r["backend"]: r for r in result["backends"]}
    assert rows[backend]["status"] == "ok", rows[backend]
    return rows["numba"], rows[backend]


@pytest.mark.gpu
@pytest.mark.parametrize("task", ["knn", "logreg"])
def test_cuml_single_backend_agrees_with_ours(task):
    """cuML's single-GPU estimators (the GPU machine with the RAPIDS parts) against ours."""
    pytest.importorskip("cuml")
    ours, theirs = _beside_ours(task, "cuml-single", {"workers": 1})
    tolerance = 0 if task == "knn" else 0.02  # the same neighbours and vote: the same labels
    assert abs(theirs["accuracy"] - ours["accuracy"]) <= tolerance
    assert "one GPU" in theirs["note"]


@pytest.mark.gpu
def test_cuvs_backend_finds_our_neighbours():
    """cuVS's brute force (the GPU machine with the RAPIDS parts): the same neighbours and
    vote as ours on digits, so the same accuracy; its logistic-regression row says why."""
    pytest.importorskip("cuvs")
    ours, theirs = _beside_ours("knn", "cuvs", {"workers": 1})
    assert theirs["accuracy"] == ours["accuracy"] and "brute force" in theirs["note"]
    from mgpu_dask.jobs import compare_job

    row = compare_job("logreg", ["cuvs"], dataset="digits",
                      options={"C": 1.0, "max_iter": 10, "tol": 1e-4, "repeats": 1},
                      cluster_options={"workers": 1, "dashboard_address": ":0"})["backends"][0]
    assert row["status"] == "skipped: cuVS is vector search only (no logistic regression)"


def test_cuda_c_sources_define_the_kernels_launched():
    """The .cu files ship with the package and hold every kernel the loader launches."""
    import re

    from mgpu_dask.compare.cuda_c import kernels as cuda_c

    for name, kernels in cuda_c.KERNELS.items():
        text = cuda_c.source(name)
        assert set(re.findall(r'extern "C" __global__ void (\w+)\(', text)) == set(kernels)


@pytest.mark.gpu
@pytest.mark.parametrize("task", ["knn", "logreg"])
def test_cuda_c_backend_agrees_with_ours(task):
    """Our algorithm in CUDA C against our Numba rows: the same neighbours, the same labels."""
    ours, theirs = _beside_ours(task, "cuda-c", {"workers": 1})
    tolerance = 0 if task == "knn" else 0.01
    assert abs(theirs["accuracy"] - ours["accuracy"]) <= tolerance


@pytest.mark.parametrize("weights", ["distance", "uniform"])
def test_faiss_backend_finds_our_neighbours(weights):
    """FAISS's flat index on one worker (its CPU index in CI, its GPU index on the GPU
    machine with the FAISS parts): the same neighbours and vote as ours, so the same test
    predictions; placement timed apart; its logistic-regression row says why."""
    pytest.importorskip("faiss")
    from mgpu_dask.config.environment import has_gpu
    from mgpu_dask.jobs import compare_job

    # one GPU worker (a LocalCUDACluster has one per GPU), or two CPU workers
    device = {"device": "gpu", "workers": 1} if has_gpu() else {"device": "cpu", "workers": 2}
    result = compare_job("knn", ["numba", "faiss", "sklearn"], dataset="digits",
                         options={"k": 5, "weights": weights, "repeats": 2},
                         cluster_options={"dashboard_address": ":0", **device})
    rows = {r["backend"]: r for r in result["backends"]}
    if rows["faiss"]["status"].startswith("skipped: this FAISS was built without GPU"):
        pytest.skip(rows["faiss"]["status"])  # faiss-cpu on a GPU machine
    assert rows["faiss"]["status"] == "ok", rows["faiss"]
    assert rows["faiss"]["differ_from_sklearn"] == 0 == rows["numba"]["differ_from_sklearn"]
    assert rows["faiss"]["accuracy"] == rows["numba"]["accuracy"]
    assert rows["faiss"]["placing"] > 0 and rows["faiss"]["timed"].startswith("inside one worker")
    where = "one GPU (GpuIndexFlatL2)" if has_gpu() else "FAISS's CPU IndexFlatL2"
    assert where in rows["faiss"]["note"]
    row = compare_job("logreg", ["faiss"], dataset="digits",
                      options={"C": 1.0, "max_iter": 10, "tol": 1e-4, "repeats": 1},
                      cluster_options={"dashboard_address": ":0", **device})["backends"][0]
    assert row["status"] == "skipped: FAISS is vector search only (no logistic regression)"


@pytest.mark.gpu
@pytest.mark.parametrize("task", ["knn", "logreg"])
def test_torch_backend_on_gpu_shards_agrees_with_ours(task):
    """PyTorch on the GPU worker's CuPy shards through DLPack, against our rows."""
    pytest.importorskip("torch")
    ours, theirs = _beside_ours(task, "torch", {"workers": 1})
    assert abs(theirs["accuracy"] - ours["accuracy"]) <= (0.002 if task == "knn" else 0.01)


@pytest.mark.parametrize("task", ["knn", "logreg"])
def test_torch_backend_agrees_with_ours(task):
    """PyTorch on both workers' shards (DLPack views; logistic regression as a Gloo group of
    two on CPU workers) against our rows, where torch is installed."""
    pytest.importorskip("torch")
    ours, theirs = _beside_ours(task, "torch", {"workers": 2, "device": "cpu"})
    assert abs(theirs["accuracy"] - ours["accuracy"]) < 0.01
    assert theirs["warm"]["fit"] >= 0
    if task == "logreg":
        assert theirs["note"] == "torch.distributed over 2 workers"


@pytest.mark.parametrize("task", ["knn", "logreg"])
def test_torch_script_backend_agrees_with_ours(task):
    """The PyTorch scripts on one worker against our rows, where torch is installed."""
    pytest.importorskip("torch")
    ours, theirs = _beside_ours(task, "torch-script", {"workers": 2, "device": "cpu"})
    assert abs(theirs["accuracy"] - ours["accuracy"]) < 0.01
    assert theirs["warm"]["fit"] >= 0 and "the CPU of one worker" in theirs["note"]


def test_torch_lbfgs_over_blocks_is_the_one_block_fit(digits):
    """Rows in several blocks (a worker's shards, and what an all-reduce adds up) give the
    fit of the rows in one block; the all-reduce hook sees every evaluation."""
    torch = pytest.importorskip("torch")
    from mgpu_dask.compare.torch_ops import lbfgs_fit

    X = torch.as_tensor(digits.X_train / 16.0, dtype=torch.float64)
    y = torch.as_tensor(digits.y_train, dtype=torch.int64)
    one = lbfgs_fit([X], [y], len(X), 10, 1.0, 60, 1e-6)
    calls = []
    parts = lbfgs_fit([X[:500], X[500:500], X[500:]], [y[:500], y[500:500], y[500:]], len(X),
                      10, 1.0, 60, 1e-6, all_reduce=calls.append)
    assert len(calls) >= parts[2] > 10  # one evaluation or more per iteration
    torch.testing.assert_close(parts[0], one[0], rtol=0, atol=1e-9)
    torch.testing.assert_close(parts[1], one[1], rtol=0, atol=1e-9)
    assert parts[2] == one[2]


@pytest.mark.parametrize("arch", ["compute_80", "compute_90"])
def test_cuda_c_sources_compile_with_nvrtc_without_warnings(arch):
    """NVRTC (the compiler behind CuPy's RawModule) needs no GPU: CI compiles our kernels
    with the options CuPy is given, and the PTX holds every kernel the loader launches."""
    import re

    import nvrtc_compile

    from mgpu_dask.compare.cuda_c import kernels as cuda_c

    if nvrtc_compile.library_path() is None:
        pytest.skip("NVRTC not installed (pip install nvidia-cuda-nvrtc; the test extra has it)")
    for name, kernels in cuda_c.KERNELS.items():
        ok, log, ptx = nvrtc_compile.compile_source(
            cuda_c.source(name), cuda_c.SOURCES[name],
            [f"--gpu-architecture={arch}", *cuda_c.OPTIONS])
        assert ok and not log.strip(), log
        assert set(re.findall(rb"\.entry (\w+)", ptx)) == set(k.encode() for k in kernels)


def _reference_scan(G, ld, m, width, norms, col0, keys, cols):
    """scan_topk's contract: fold a tile's keys (float64) into each row's sorted list."""
    tile = np.asarray(G)[:m * ld].reshape(m, ld)[:, :width].astype(np.float64)
    new = norms[col0:col0 + width].astype(np.float64)[None, :] - 2.0 * tile
    all_keys = np.concatenate([keys, new], axis=1)
    all_cols = np.concatenate([cols, np.broadcast_to(
        np.arange(col0, col0 + width, dtype=np.int32), (m, width))], axis=1)
    order = np.lexsort((all_cols, all_keys), axis=1)[:, :keys.shape[1]]
    keys[...] = np.take_along_axis(all_keys, order, 1)
    cols[...] = np.take_along_axis(all_cols, order, 1)


def _reference_refine(Q, T, cols, d, k):
    diff = Q[:, None, :d].astype(np.float64) - T[cols][:, :, :d].astype(np.float64)
    sq = (diff * diff).sum(-1)
    order = np.lexsort((cols, sq), axis=1)[:, :k]  # by distance, then training row
    return np.take_along_axis(sq, order, 1), np.take_along_axis(cols, order, 1)


@pytest.mark.parametrize("data", ["8-bit", "float"])
def test_cuda_c_block_feeds_the_kernels_our_operands(client, digits, monkeypatch, data):
    """The cuda-c backend's host side on CPU: the kernels' contracts (NumPy stand-ins, the
    same ones the GPU tests hold the kernels to) fed our padded operands and tile products
    give our KNN's labels: exact keys for 8-bit data, the float64 re-rank for other data."""
    from mgpu_dask.compare.cuda_c import backend
    from mgpu_dask.compare.cuda_c import kernels as cuda_c
    from mgpu_dask.compare.on_shards import each_copy, place_copies, predict_on_copies

    refined = []
    monkeypatch.setattr(cuda_c, "scan", _reference_scan)
    monkeypatch.setattr(cuda_c, "refine", lambda *a: refined.append(1) or _reference_refine(*a))
    monkeypatch.setattr(cuda_c, "vote", lambda sq, rows, labels, n_classes, weights: (
        cupy_backend.vote(np.sqrt(sq), np.asarray(labels)[rows], weights, n_classes)))
    monkeypatch.setattr(cuda_c, "tile_step", lambda m, n: 96)  # several tiles, the last short
    s = digits
    scale = 1.0 if data == "8-bit" else 0.37  # digits' pixels are integers 0..16
    X = shard(s.X_train * scale, client, device="cpu")
    Q = shard(s.X_test * scale, client, device="cpu")
    names = np.array(list("abcdefghij"))
    rows = place_copies(client, cupy_backend.to_device, s.X_train * scale,
                        s.y_train.astype(np.int32), timeout=60)
    exact = data == "8-bit"
    copies = each_copy(client, rows, functools.partial(backend.prepare_rows, exact=exact,
                                                        shift=128 if exact else 0), 60)
    for weights in ("distance", "uniform"):
        ours = KNeighborsClassifier(5, weights=weights).fit(X, names[s.y_train])
        want = to_host(ours.predict(Q))
        codes = predict_on_copies(client, copies, Q, backend._cuda_c_block, 5, weights, 10,
                                  timeout=60)
        np.testing.assert_array_equal(names[codes], want)
        assert len(want) == len(s.X_test)
    assert bool(refined) == (data == "float")


def test_torch_tensor_shares_memory_and_copies_only_read_only_arrays():
    """DLPack hands NumPy blocks to PyTorch without a copy; a read-only block (DLPack cannot
    mark it so) comes over as a copy, and the original stays untouched."""
    torch = pytest.importorskip("torch")
    from mgpu_dask.compare.torch_ops import tensor

    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = tensor(a)
    t[0, 0] = 42.0
    assert a[0, 0] == 42.0 and t.dtype == torch.float32 and tuple(t.shape) == (3, 4)
    b = np.arange(6, dtype=np.int64)
    b.setflags(write=False)
    u = tensor(b)
    u[0] = 7
    assert b[0] == 0 and u.tolist() == [7, 1, 2, 3, 4, 5]


def _torch_group_open() -> bool:
    import torch.distributed as dist

    return dist.is_initialized()


def test_torch_logreg_group_of_three_processes_is_closed_after_the_run(process_client, digits):
    """Three worker processes: one Gloo group of three ranks takes the same L-BFGS steps
    (the model predicts as well as ours); the group is gone from every worker afterwards."""
    pytest.importorskip("torch")
    from mgpu_dask.compare import BackendRun
    from mgpu_dask.compare import torch as torch_backend

    run = BackendRun(digits, process_client, "cpu",
                     {"C": 1.0, "max_iter": 100, "tol": 1e-4, "repeats": 1}, 120)
    out = torch_backend.logreg(run)
    assert out["note"] == "torch.distributed over 3 workers"
    assert out["warm"][0]["accuracy"] > 0.93 and out["cold"]["accuracy"] > 0.93
    assert set(process_client.run(_torch_group_open).values()) == {False}


def test_backend_list_runs_those_side_by_side(tmp_path, capsys):
    """``--backend sklearn,numba,sklearn``: those two rows, in the order given, once each."""
    out = tmp_path / "two.json"
    assert main(["knn", "--dataset", "digits", "--backend", "sklearn,numba,sklearn",
                 "--workers", "2", "--device", "cpu", "--repeats", "1", "--quiet",
                 "--dashboard-address", ":0", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["backends"]
    assert [r["backend"] for r in rows] == ["sklearn", "numba"]
    assert [r["differ_from_sklearn"] for r in rows] == [0, 0]


@pytest.mark.parametrize("value", ["numba,jax", "all,numba", ","])
def test_bad_backend_list_is_one_error(capsys, value):
    with pytest.raises(SystemExit) as exc:
        main(["knn", "--dataset", "digits", "--backend", value])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "argument --backend" in err[-1] and "choose from numba, cupy" in err[-1]
