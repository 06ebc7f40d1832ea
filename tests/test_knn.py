"""KNeighborsClassifier on a 2-worker CPU cluster, checked against scikit-learn."""

from __future__ import annotations

import json

import dask.array as da
import numpy as np
import pytest
from sklearn.neighbors import KNeighborsClassifier as SkKNN

from mgpu_dask.data import load_dataset, shard, split
from mgpu_dask.exceptions import DataError
from mgpu_dask.knn import KNeighborsClassifier
from mgpu_dask.parallel.inputs import NotFittedError, to_host
from mgpu_dask.cli import main


@pytest.fixture(scope="module")
def digits():
    ds = load_dataset("digits")
    return split(ds.X, ds.y, test_size=0.25, seed=1)


def _tie_queries(X_train, X_test, k):
    """Queries whose k-th and (k+1)-th exact distances are equal (ambiguous neighbours).
    Integer rows: every term below is an integer float64 holds exactly, so the expanded
    form is the exact distance (without a queries x rows x features temporary)."""
    Q, T = X_test.astype(np.float64), X_train.astype(np.float64)
    assert (Q == np.round(Q)).all() and (T == np.round(T)).all()
    d = (Q * Q).sum(1)[:, None] + (T * T).sum(1)[None] - 2.0 * (Q @ T.T)
    d.sort(axis=1)
    return d[:, k - 1] == d[:, k]


@pytest.mark.parametrize("plan", ["replicate", "shard"])
@pytest.mark.parametrize("method", ["gemm", "direct"])
@pytest.mark.parametrize("weights", ["distance", "uniform"])
def test_matches_sklearn_on_digits(client, digits, plan, method, weights):
    s = digits
    clf = KNeighborsClassifier(3, weights=weights, plan=plan, method=method).fit(s.X_train, s.y_train)
    queries = shard(s.X_test, client, dtype=np.float32)
    ours = to_host(clf.predict(queries))
    sk = SkKNN(3, weights=weights, algorithm="brute").fit(
        s.X_train.astype(np.float64), s.y_train).predict(s.X_test.astype(np.float64))
    differ = ours != sk
    tied = _tie_queries(s.X_train, s.X_test, 3)
    assert not (differ & ~tied).any(), f"{differ.sum()} differences, {(differ & tied).sum()} tied"
    assert clf.plan_ == plan and (ours == s.y_test).mean() > 0.97


def test_matches_sklearn_on_mnist_subset(client, mnist_dir):
    ds = load_dataset("mnist", data_dir=mnist_dir)
    s = split(ds.X, ds.y, fraction=0.05, seed=3)   # 2,625 train x 875 test
    ours = to_host(KNeighborsClassifier(3).fit(shard(s.X_train, client), shard(s.y_train, client))
                   .predict(shard(s.X_test, client)))
    sk = SkKNN(3, weights="distance", algorithm="brute").fit(
        s.X_train.astype(np.float64), s.y_train).predict(s.X_test.astype(np.float64))
    tied = _tie_queries(s.X_train, s.X_test, 3)
    assert not ((ours != sk) & ~tied).any()
    assert (ours == s.y_test).mean() > 0.9


@pytest.mark.parametrize("plan", ["replicate", "shard"])
def test_kneighbors_and_proba_match_sklearn(client, plan):
    rng = np.random.default_rng()
    X = rng.standard_normal((400, 12)).astype(np.float32)
    y = rng.integers(0, 4, 400)
    Q = rng.standard_normal((90, 12)).astype(np.float32)
    clf = KNeighborsClassifier(5, plan=plan).fit(shard(X, client), shard(y, client))
    sk = SkKNN(5, weights="distance", algorithm="brute").fit(X.astype(np.float64), y)
    dist, ind = clf.kneighbors(shard(Q, client))
    sk_dist, sk_ind = sk.kneighbors(Q.astype(np.float64))
    np.testing.assert_array_equal(to_host(ind), sk_ind)
    np.testing.assert_allclose(to_host(dist), sk_dist, rtol=1e-6)
    np.testing.assert_allclose(to_host(clf.predict_proba(shard(Q, client))),
                               sk.predict_proba(Q.astype(np.float64)), rtol=1e-6)
    assert clf.score(shard(Q, client), sk.predict(Q.astype(np.float64))) == 1.0


@pytest.mark.parametrize("plan", ["replicate", "shard"])
def test_every_predict_gets_fresh_keys(client, digits, plan):
    """Repeated predictions must recompute, not reuse a previous result still in memory."""
    s = digits
    clf = KNeighborsClassifier(3, plan=plan).fit(s.X_train, s.y_train)
    Q = shard(s.X_test, client, dtype=np.float32)
    assert clf.predict(Q).name != clf.predict(Q).name
    assert clf.kneighbors(Q)[1].name != clf.kneighbors(Q)[1].name


def test_arbitrary_class_labels(client):
    rng = np.random.default_rng()
    X = rng.standard_normal((200, 5)).astype(np.float32)
    y = rng.choice(np.array([3, 7, 42]), 200)
    pred = to_host(KNeighborsClassifier(1).fit(X, y).predict(X))
    np.testing.assert_array_equal(pred, y)


@pytest.mark.parametrize("plan", ["replicate", "shard"])
def test_without_a_client_runs_on_the_local_scheduler(digits, monkeypatch, plan):
    import dask

    import mgpu_dask.parallel.inputs as inputs

    monkeypatch.setattr(inputs, "active_client", lambda: None)
    s = digits
    Q = da.from_array(s.X_test.astype(np.float32), chunks=(100, -1))
    y = da.from_array(s.y_train, chunks=500)
    with dask.config.set(scheduler="threads"):
        clf = KNeighborsClassifier(3, plan=plan).fit(da.from_array(s.X_train, chunks=(500, -1)), y)
        pred = clf.predict(Q).compute()
    assert (pred == s.y_test).mean() > 0.97


@pytest.mark.parametrize("plan", ["replicate", "shard"])
def test_one_training_block_without_a_client(digits, monkeypatch, plan):
    """A single training shard: its local candidates are voted in the same task."""
    import mgpu_dask.parallel.inputs as inputs

    monkeypatch.setattr(inputs, "active_client", lambda: None)
    s = digits
    clf = KNeighborsClassifier(3, plan=plan).fit(s.X_train, s.y_train)
    assert len(clf.layout_.X) == 1
    sk = SkKNN(3, weights="distance", algorithm="brute").fit(
        s.X_train.astype(np.float64), s.y_train).predict(s.X_test.astype(np.float64))
    ours = to_host(clf.predict(s.X_test))
    assert ((ours != sk) & ~_tie_queries(s.X_train, s.X_test, 3)).sum() == 0


@pytest.mark.parametrize("precision, per_value", [("auto", 1), ("bf16", 2), ("fp32", 4)])
def test_shard_plan_chosen_when_over_budget(client, digits, precision, per_value):
    s = digits  # 8-bit data: int8 keeps one byte per value, bf16 two, fp32 four
    train_bytes = s.X_train.size * per_value
    fit = dict(precision=precision)
    clf = KNeighborsClassifier(3, memory_budget=train_bytes - 1, **fit).fit(s.X_train, s.y_train)
    assert clf.plan_ == "shard"
    clf = KNeighborsClassifier(3, memory_budget=train_bytes, **fit).fit(s.X_train, s.y_train)
    assert clf.plan_ == "replicate"
    with pytest.raises(DataError, match="does not fit 2 worker"):
        KNeighborsClassifier(3, plan="shard", memory_budget=train_bytes // 3,
                             **fit).fit(s.X_train, s.y_train)


def test_shard_plan_sends_each_query_block_before_searching_and_merges_on_its_holder(
        client, digits):
    """Under the shard plan a worker's own query block leaves for the other workers before
    its own search starts (they would wait a whole search for it otherwise), and each
    block's candidates are merged and voted on its holder, where its own candidates are."""
    from distributed import get_task_stream

    s = digits
    clf = KNeighborsClassifier(3, plan="shard").fit(s.X_train, s.y_train)
    queries = shard(s.X_test, client)
    expected = to_host(clf.predict(queries))
    with get_task_stream(client) as stream:
        got = to_host(clf.predict(queries))
    np.testing.assert_array_equal(got, expected)
    starts: dict[str, list[tuple[float, str]]] = {}
    holder, merged_on = {}, {}
    for task in stream.data:
        key = task["key"]
        name, i = key[0], key[1]
        start = min(ss["start"] for ss in task["startstops"] if ss["action"] == "compute")
        starts.setdefault(task["worker"], []).append((start, name))
        if name.endswith("-send"):
            holder[i] = task["worker"]
        elif name.startswith("knn-predict") and len(key) == 2:
            merged_on[i] = task["worker"]
    assert len(holder) == 2 and len(set(holder.values())) == 2  # a block on each worker
    assert merged_on == holder
    for worker, ran in starts.items():
        first = sorted(ran)[0][1]
        assert first.endswith("-send"), f"{worker} searched before its block left: {sorted(ran)}"


@pytest.mark.parametrize("kwargs, fit_args, match", [
    ({"n_neighbors": 0}, None, "positive integer"),
    ({"n_neighbors": 2.5}, None, "positive integer"),
    ({"n_neighbors": 11}, None, "larger than n_samples = 10"),
    ({"weights": "cosine"}, None, "weights='cosine'"),
    ({"plan": "broadcast"}, None, "plan='broadcast'"),
    ({}, "nan", "Input X contains NaN"),
    ({}, "1d", "Expected 2D array"),
    ({}, "labels", "inconsistent numbers of samples"),
    ({}, "float-labels", "Unknown label type"),
])
def test_bad_fit_input(client, kwargs, fit_args, match):
    X = np.random.default_rng().random((10, 3)).astype(np.float32)
    y = np.arange(10) % 2
    if fit_args == "nan":
        X[3, 1] = np.nan
    elif fit_args == "1d":
        X = X[:, 0]
    elif fit_args == "labels":
        y = y[:5]
    elif fit_args == "float-labels":
        y = y + 0.5
    with pytest.raises(DataError, match=match):
        KNeighborsClassifier(**kwargs).fit(X, y)


def test_bad_predict_input(client):
    X = np.random.default_rng().random((10, 3)).astype(np.float32)
    clf = KNeighborsClassifier(3)
    with pytest.raises(NotFittedError, match="call fit"):
        clf.predict(X)
    clf.fit(X, np.arange(10) % 2)
    with pytest.raises(DataError, match="X has 4 features, but KNeighborsClassifier is "
                                        "expecting 3 features as input"):
        clf.predict(np.zeros((2, 4), np.float32))
    with pytest.raises(DataError, match="X has 4 features, but"):  # dask queries: same words
        clf.predict(da.from_array(np.zeros((2, 4), np.float32)))
    bad = X.copy()
    bad[0, 0] = np.inf
    with pytest.raises(DataError, match="Input X contains infinity"):
        clf.predict(bad)
    with pytest.raises(DataError, match="query rows contain NaN or infinity"):  # where it lives
        to_host(clf.predict(da.from_array(bad)))
    with pytest.raises(DataError, match="between 1 and n_samples = 10"):
        clf.kneighbors(X, n_neighbors=11)


def test_cli_knn_digits(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["knn", "--dataset", "digits", "--workers", "2", "--device", "cpu", "--k", "5",
                 "--repeats", "2", "--quiet", "--dashboard-address", ":0", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "accuracy:" in text and "warm predict" in text and "query shard 1" in text
    result = json.loads(out.read_text())
    assert result["n_neighbors"] == 5 and result["workers"] == 2 and result["accuracy"] > 0.95
    for phase in ("cluster start", "transfer", "distances+top-k", "vote", "total"):
        assert result["cold"][phase] > 0
    assert len(result["warm_predict_seconds"]) == 2 and result["machine"]["host"]
    assert not list(tmp_path.glob(".*part"))
    assert result["fraction_note"] is None and "repeated" not in text


def test_cli_knn_says_repeated_rows_lower_accuracy(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["knn", "--dataset", "digits", "--workers", "1", "--device", "cpu",
                 "--fraction", "2", "--repeats", "1", "--quiet", "--dashboard-address", ":0",
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    result = json.loads(out.read_text())
    assert "repeats every row" in result["fraction_note"]
    accuracy_line = next(line for line in text.splitlines() if line.startswith("accuracy:"))
    assert "rows repeated 2x" in accuracy_line


@pytest.mark.parametrize("argv, match", [
    (["--k", "0"], "positive integer"),
    (["--k", "5000"], "(1 to 64, e.g. 3)"),
])
def test_cli_knn_bad_k(capsys, argv, match, monkeypatch):
    """A bad --k is refused before the data loads or a cluster starts."""
    import mgpu_dask.cluster.starting as starting
    import mgpu_dask.data.datasets as datasets

    def never(*args, **kwargs):
        raise AssertionError("started or loaded before the options were checked")

    monkeypatch.setattr(starting.StartingCluster, "__init__", never)
    monkeypatch.setattr(datasets, "load_dataset", never)
    code = main(["knn", "--dataset", "digits", "--workers", "1", "--device", "cpu", "--quiet",
                 "--dashboard-address", ":0", *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error:") and match in err and "\n" not in err


@pytest.mark.parametrize("plan", ["replicate", "shard"])
def test_fit_from_numpy_prints_no_large_graph_warning(client, digits, plan):
    """Rows from NumPy travel inside the graph (lineage for recovery) without Dask's advice."""
    import warnings

    import dask

    s = digits
    with dask.config.set({"distributed.admin.large-graph-warning-threshold": "40kB"}), \
            warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*large graph")
        assert s.X_train.nbytes > 80_000  # twice the threshold: Dask would warn
        clf = KNeighborsClassifier(3, plan=plan).fit(s.X_train, s.y_train)
    assert (to_host(clf.predict(s.X_test)) == s.y_test).mean() > 0.97


def _knn_digits_json(tmp_path, name: str, *options: str) -> dict:
    """``knn`` on digits with two CPU workers and ``options``; its JSON result."""
    out = tmp_path / f"{name}.json"
    assert main(["knn", "--dataset", "digits", "--workers", "2", "--device", "cpu", *options,
                 "--repeats", "1", "--quiet", "--dashboard-address", ":0",
                 "--json", str(out)]) == 0
    return json.loads(out.read_text())


def test_cli_dtype_float32_same_predictions_and_notes(tmp_path):
    got = {dtype: _knn_digits_json(tmp_path, dtype, "--dtype", dtype)
           for dtype in ("uint8", "float32")}
    assert got["uint8"]["dtype"] == "uint8" and got["float32"]["dtype"] == "float32"
    assert got["uint8"]["accuracy"] == got["float32"]["accuracy"] > 0.95
    rows = {r["backend"]: r for r in _knn_digits_json(tmp_path, "all", "--backend", "all")
            ["backends"]}
    # ours runs on the 8-bit rows as they are: its note says what ran, and no conversion
    assert rows["numba"]["note"] == "plan replicate, int8 products"
    assert rows["sklearn"]["note"] == "rows converted to float32 (--dtype uint8)"


def test_cli_json_names_the_search_that_ran(tmp_path):
    """Every figure names the path that made it: the workers' search, here the tile loop
    of the CPU with the run's precision."""
    got = _knn_digits_json(tmp_path, "search", "--dtype", "uint8")
    assert got["search"] == [f"tile loop, {got['precision']} products on the CPU"]


def test_cli_knn_shard_plan_reports_the_merge_traffic(tmp_path, capsys):
    """The shard plan merges candidates across workers: the transfer records show it in
    the predict phases -- the tasks' in Dask's log, and the straight fused predict's (query
    blocks fetched, candidates handed over) in ours -- while the replicate plan's queries
    never move."""
    moved = {plan: _knn_digits_json(tmp_path, plan, "--plan", plan)["bytes_between_workers"]
             for plan in ("shard", "replicate")}
    warm = moved["shard"]["warm per repetition"]
    assert warm["distances+top-k"] > 0 and warm["fused predict"] > 0
    warm = moved["replicate"]["warm per repetition"]
    assert warm["distances+top-k"] == 0 and warm["fused predict"] == 0
    assert "moved between workers (tcp" in capsys.readouterr().out


def test_cli_protocol_ucx_without_ucxx_is_one_line(capsys):
    import importlib.util

    if importlib.util.find_spec("distributed_ucxx") is not None:
        pytest.skip("distributed-ucxx is installed here")
    assert main(["knn", "--dataset", "digits", "--workers", "1", "--device", "cpu",
                 "--protocol", "ucx", "--quiet"]) != 0
    err = capsys.readouterr().err.strip()
    assert "distributed-ucxx" in err and "\n" not in err


def test_small_training_sets_do_not_ask_the_gpus_for_free_memory(monkeypatch):
    """Rows under 1% of every GPU's memory are replicated against 80% of that memory,
    with no round trip to the workers; larger ones ask for the free memory."""
    from mgpu_dask.knn import choices
    from mgpu_dask.parallel.workers import Facts

    whole = 80 * 2**30
    monkeypatch.setattr(choices, "fixed_facts", lambda client: {
        "a": Facts(True, (9, 0), whole), "b": Facts(True, (9, 0), 2 * whole)})
    asked = []
    monkeypatch.setattr(choices, "free_gpu_memory",
                        lambda client: asked.append(1) or [whole // 2, whole])
    assert choices.worker_budget(object(), "gpu", int(0.01 * whole)) == int(0.8 * whole)
    assert asked == []
    assert choices.worker_budget(object(), "gpu", int(0.02 * whole)) == int(0.8 * whole // 2)
    assert choices.worker_budget(object(), "gpu") == int(0.8 * whole // 2)
    assert asked == [1, 1]


def test_row_indices_are_kept_per_size_and_offset():
    """A training block's global row indices are made once per size and offset and kept
    (every search of the block asks for them), the eight most recently used."""
    from mgpu_dask.knn import blocks

    first = blocks.row_index(np, 5, 7)
    np.testing.assert_array_equal(first, np.arange(7, 12))
    assert first.dtype == np.int64
    assert blocks.row_index(np, 5, 7) is first
    np.testing.assert_array_equal(blocks.row_index(np, 5, 0), np.arange(5))
    for offset in range(100, 108):  # eight others push the first out
        blocks.row_index(np, 3, offset)
    again = blocks.row_index(np, 5, 7)
    assert again is not first
    np.testing.assert_array_equal(again, first)
    assert len(blocks._INDEXES) <= blocks._INDEXES_KEPT
