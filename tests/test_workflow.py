"""Workflow files: validation, expansion, and runs through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mgpu_dask.exceptions import MgpuDaskError
from mgpu_dask.cli import main
from mgpu_dask.jobs.workflow import expand, load_workflow

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("path", sorted((REPO / "workflows").glob("*.yaml")))
def test_shipped_workflows_are_valid(path):
    flow = load_workflow(path)
    assert flow.task in ("knn", "logreg") and expand(flow)


def test_expand_is_the_cartesian_product(tmp_path):
    f = tmp_path / "w.yaml"
    f.write_text("task: knn\noptions: {k: 5}\nsweep: {fraction: [1, 4], workers: [1, 2, 4]}\n")
    runs = expand(load_workflow(f))
    assert len(runs) == 6 and runs[0] == {"k": 5, "fraction": 1, "workers": 1}
    assert runs[-1] == {"k": 5, "fraction": 4, "workers": 4}


@pytest.mark.parametrize("text, match", [
    ("task: svm\n", "task 'svm'"),
    ("task: knn\nsweeps: {}\n", "unknown key"),
    ("- just a list\n", "must be a mapping"),
    ("task: knn\noptions: [1, 2]\n", "must be mappings"),
    ("task: [unclosed\n", "not valid YAML"),
])
def test_bad_workflow_files(tmp_path, text, match):
    f = tmp_path / "w.yaml"
    f.write_text(text)
    with pytest.raises(MgpuDaskError, match=match):
        load_workflow(f)


def test_missing_file():
    with pytest.raises(MgpuDaskError, match="does not exist"):
        load_workflow("/nonexistent/w.yaml")


def test_unknown_option_names_the_run(tmp_path, capsys):
    f = tmp_path / "w.yaml"
    f.write_text("task: knn\noptions: {neighbours: 3, dataset: digits}\n")
    assert main(["workflow", str(f)]) == 2
    assert "not valid for knn" in capsys.readouterr().err


def test_workers_sweep_needs_a_local_cluster(tmp_path, capsys):
    f = tmp_path / "w.yaml"
    f.write_text("task: knn\noptions: {dataset: digits}\nsweep: {workers: [1, 2]}\n")
    assert main(["workflow", str(f), "--scheduler-address", "tcp://127.0.0.1:9"]) == 2
    assert "only a local cluster" in capsys.readouterr().err


def test_comparison_workflow_runs(tmp_path, capsys):
    f = tmp_path / "w.yaml"
    f.write_text("name: cmp\ntask: knn\noptions: {dataset: digits, repeats: 1, backend: all}\n"
                 "sweep: {fraction: [0.5, 1]}\n")
    out = tmp_path / "r.json"
    assert main(["workflow", str(f), "--json", str(out), "--workers", "2", "--device", "cpu",
                 "--dashboard-address", ":0"]) == 0
    payload = json.loads(out.read_text())
    assert payload["workflow"] == "cmp" and len(payload["runs"]) == 2
    rows = {r["backend"]: r for r in payload["runs"][1]["backends"]}
    assert rows["numba"]["status"] == "ok" and rows["sklearn"]["status"] == "ok"
    assert "needs GPU" in rows["cuml"]["status"]



def test_a_run_the_machine_cannot_do_fails_alone(tmp_path, capsys):
    from mgpu_dask.config.environment import gpu_count

    if gpu_count():
        pytest.skip("needs a machine without GPUs (the gpu run must fail)")
    f = tmp_path / "w.yaml"
    f.write_text("task: knn\noptions: {dataset: digits, repeats: 1}\n"
                 "sweep: {device: [gpu, cpu], workers: [1]}\n")
    out = tmp_path / "r.json"
    assert main(["workflow", str(f), "--json", str(out)]) == 0
    runs = json.loads(out.read_text())["runs"]
    assert "no NVIDIA GPU" in runs[0]["error"] and runs[1]["accuracy"] > 0.95
    assert "  error: --device gpu but no NVIDIA GPU" in capsys.readouterr().out
