"""What ran is what is reported: every fallback, forced, prints one ``note:`` line with
its reason and lands in the JSON; a broken optional package shows its own error."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from mgpu_dask.cli import main
from mgpu_dask.data import load_dataset, shard, split


def _run(argv, tmp_path, capsys):
    out = tmp_path / "result.json"
    assert main([*argv, "--dataset", "digits", "--repeats", "1", "--quiet",
                 "--dashboard-address", ":0", "--json", str(out)]) == 0
    err = capsys.readouterr().err
    return json.loads(out.read_text()), [line for line in err.splitlines()
                                         if line.startswith("note: ")]


def _once(note_lines, needle):
    found = [line for line in note_lines if needle in line]
    assert len(found) == 1, note_lines
    return found[0]


@pytest.fixture
def broken_package(tmp_path, monkeypatch):
    """An installed package whose import fails, as a CuPy without its CUDA libraries does."""
    package = tmp_path / "site" / "brokenpkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "raise OSError('libcudart.so.13: cannot open shared object file')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return "brokenpkg"


def test_a_broken_optional_package_shows_its_own_error(broken_package, monkeypatch):
    from mgpu_dask.compare import backend
    from mgpu_dask.config.environment import import_error, optional_import, unusable

    assert optional_import(broken_package) is None
    assert "libcudart.so.13: cannot open" in import_error(broken_package)
    assert optional_import("surely_not_a_package_here") is None
    assert import_error("surely_not_a_package_here") is None
    why = unusable(broken_package, "cuda13", "CuPy")
    assert why == ("CuPy is installed but does not import (OSError: libcudart.so.13: cannot "
                   "open shared object file)")
    assert unusable("surely_not_a_package_here", "x") == (
        "surely_not_a_package_here is not installed (pip install 'mgpu-dask[x]')")
    monkeypatch.setitem(backend.NEEDS, "torch", [(broken_package, "torch", "PyTorch")])
    assert "does not import (OSError: libcudart.so.13" in backend.unavailable("torch", "cpu")


def test_info_names_the_reason_a_backend_cannot_run(broken_package, monkeypatch, capsys):
    from mgpu_dask.compare import backend

    monkeypatch.setitem(backend.NEEDS, "torch", [(broken_package, "torch", "PyTorch")])
    assert main(["info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["backends"]["torch"] is False
    assert "libcudart.so.13" in info["unavailable"]["torch"]


def test_auto_device_on_cpu_says_why(tmp_path, capsys, monkeypatch):
    """GPUs visible but no dask-cuda: the run goes to CPU workers and says so once."""
    import mgpu_dask.cluster.plan as plan
    from mgpu_dask.config.environment import GPU

    monkeypatch.setattr(plan, "gpu_count", lambda: 1)
    monkeypatch.setattr(plan, "visible_gpus", lambda: (GPU(0, "Fake GPU", 2**34),))
    monkeypatch.setattr(plan, "is_installed", lambda name: name not in ("dask_cuda", "cupy"))
    result, notes = _run(["knn", "--workers", "1"], tmp_path, capsys)
    assert result["device"] == "cpu"
    line = _once(notes, "dask-cuda or CuPy is missing")
    assert line[len("note: "):] in result["notes"]


def test_a_precision_that_cannot_run_is_recorded_as_the_one_that_ran(tmp_path, capsys):
    result, notes = _run(["logreg", "--workers", "1", "--device", "cpu", "--precision", "int8"],
                         tmp_path, capsys)
    assert result["precision"] == result["evaluation"] == "fp32"
    assert result["precision_requested"] == "int8"
    line = _once(notes, "int8 products run on GPUs: float32 on the CPU")
    assert line[len("note: "):] in result["notes"]
    auto, notes = _run(["logreg", "--workers", "1", "--device", "cpu"], tmp_path, capsys)
    assert auto["precision"] == "fp32" and auto["precision_requested"] == "auto"
    assert not [n for n in notes if "products" in n]  # auto asked for the best that applies


def test_knn_direct_method_says_its_precision_does_not_apply(client):
    from mgpu_dask.knn import KNeighborsClassifier

    ds = load_dataset("digits")
    s = split(ds.X, ds.y)
    direct = KNeighborsClassifier(3, method="direct", precision="bf16").fit(s.X_train, s.y_train)
    assert direct.precision_ == "fp32"
    assert "method='direct'" in direct.precision_note_ and "bf16" in direct.precision_note_
    auto = KNeighborsClassifier(3, method="direct").fit(s.X_train, s.y_train)
    assert auto.precision_ == "fp32" and auto.precision_note_ is None


def test_recovery_plugin_that_does_not_load_is_a_note(tmp_path, capsys, monkeypatch):
    import mgpu_dask.parallel.recovery as recovery

    class Refused(recovery.PinRecovery):
        def __init__(self):
            raise RuntimeError("the scheduler has no mgpu_dask")

    monkeypatch.setattr(recovery, "PinRecovery", Refused)
    result, notes = _run(["knn", "--workers", "1", "--device", "cpu"], tmp_path, capsys)
    line = _once(notes, "recovery plugin did not load")
    assert "no mgpu_dask" in line and line[len("note: "):] in result["notes"]


def test_message_batching_left_at_its_defaults_is_a_note(tmp_path, capsys, monkeypatch):
    import mgpu_dask.parallel.latency as latency

    class Refused(latency.SchedulerIntervals):
        def __init__(self, seconds):
            raise RuntimeError("cannot unpickle")

    monkeypatch.setattr(latency, "SchedulerIntervals", Refused)
    result, notes = _run(["logreg", "--workers", "1", "--device", "cpu"], tmp_path, capsys)
    line = _once(notes, "message batching stays at its defaults")
    assert "cannot unpickle" in line and line[len("note: "):] in result["notes"]


def test_single_host_fit_that_fell_back_to_actors_says_so(client, monkeypatch):
    from mgpu_dask.logreg import LogisticRegression
    from mgpu_dask.parallel import peer_views

    hosts = (f"host-{i}" for i in itertools.count())  # every export sees another host
    monkeypatch.setattr(peer_views, "_hostname", lambda: next(hosts))
    rng = np.random.default_rng()
    X = shard(rng.standard_normal((200, 4)), client, dtype=np.float32)
    y = (rng.random(200) > 0.5).astype(int)
    fitted = LogisticRegression(max_iter=20).fit(X, y)
    assert fitted.comm_ == "actors"
    assert any("fitted by actors" in n and "more than one host" in n for n in fitted.notes_)


def test_a_device_loop_without_its_graph_says_why():
    """The notes of a fit name a device L-BFGS that ran op by op (its capture refused)."""
    from mgpu_dask.logreg import LogisticRegression

    fitted = LogisticRegression()
    fitted.classes_ = np.array([0, 1])
    result = {"x": np.zeros(6), "nit": 3, "nfev": 4, "round_trips": 1, "comm": "single-host",
              "optimizer": "device", "precision": "int8", "graph": False, "fun": 0.5,
              "success": True, "graph_note": "not captured: UCX runs in this process",
              "launch_note": None}
    fitted._keep_result(result, 2)
    assert fitted.graph_ is False
    assert fitted.notes_ == ["each L-BFGS iteration ran op by op, not as one CUDA graph: "
                             "not captured: UCX runs in this process"]
    fitted._keep_result({**result, "graph": True, "graph_note": None}, 2)
    assert fitted.notes_ == []
