"""The bench sweep: rows, CSV/JSON, PNG and HTML plots, and the CLI."""

from __future__ import annotations

import csv
import json
import re

import pytest

from mgpu_dask.jobs.bench import COLUMNS, flatten, write_outputs
from mgpu_dask.cli import main


def _result(task, fraction, n_train, times):
    rows = []
    for backend, t in times.items():
        if t is None:
            rows.append({"backend": backend, "status": "cuML is not installed"})
        else:
            rows.append({"backend": backend, "status": "ok", "accuracy": 0.9,
                         "cold": {"fit": 2 * t, "predict": t}, "warm": {"fit": t, "predict": t},
                         "warm_total": 2 * t})
    return {"task": task, "fraction": fraction, "n_train": n_train, "n_test": n_train // 3,
            "backends": rows}


def test_flatten_and_outputs(tmp_path):
    rows = []
    for workers in (1, 2, 4):
        for fraction, n in ((1, 1000), (4, 4000)):
            rows += flatten(_result("knn", fraction, n,
                                    {"numba": 0.01 * n / 1000 / workers, "sklearn": 0.05 * n / 1000,
                                     "cuml": None}), workers)
    assert len(rows) == 18 and set(rows[0]) == set(COLUMNS)
    missing = [r for r in rows if r["backend"] == "cuml"]
    assert all(r["warm_total"] is None and "not installed" in r["status"] for r in missing)
    paths = write_outputs(rows, tmp_path, {"command": "test"})
    names = sorted(p.name for p in paths)
    assert names == ["bench.html", "knn_time_vs_gpus.png", "knn_time_vs_size.png",
                     "results.csv", "results.json"]
    with open(tmp_path / "results.csv") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 18 and table[0]["backend"] == "numba"
    assert json.loads((tmp_path / "results.json").read_text())["rows"][6]["workers"] == 2
    png = (tmp_path / "knn_time_vs_gpus.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert "bokeh" in (tmp_path / "bench.html").read_text().lower()
    assert not list(tmp_path.glob(".*"))  # no temporary files left


def _rows():
    rows = []
    for workers in (1, 2, 4):
        for fraction, n in ((1, 1000), (4, 4000)):
            rows += flatten(_result("knn", fraction, n, {"numba": 0.01 * n / 1000 / workers,
                                                         "cupy": 0.02 * n / 1000}), workers)
    return rows


def test_plot_views_name_their_setting_and_draw_ideal_scaling():
    from mgpu_dask.jobs.bench import LABELS, _views

    gpus, size = _views(_rows())
    assert gpus["title"] == "knn: warm time vs GPUs, 4,000 training rows"
    assert size["title"] == "knn: warm time vs training rows, 4 GPUs"
    assert gpus["ticks"] == [1, 2, 4] and size["ticks"] == [1000, 4000]
    xs, ys = gpus["ideal"]
    assert xs == [1, 2, 4] and ys[0] == gpus["lines"]["numba"][1][0] and ys[2] == ys[0] / 4
    assert size["ideal"] is None and LABELS["numba"] == "ours (Numba kernels)"


def test_replot_rewrites_plots_from_results_json(tmp_path, capsys):
    write_outputs(_rows(), tmp_path, {"command": "the sweep"})
    for png in tmp_path.glob("*.png"):
        png.unlink()
    assert main(["bench", "--replot", "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["knn_time_vs_gpus.png",
                                                              "knn_time_vs_size.png"]
    assert json.loads((tmp_path / "results.json").read_text())["command"] == "the sweep"
    capsys.readouterr()
    assert main(["bench", "--replot", "--out", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --replot needs a bench results.json") and "\n" not in err


def test_bench_cli_small_sweep(tmp_path, capsys):
    out = tmp_path / "bench"
    assert main(["bench", "--dataset", "digits", "--tasks", "knn", "--workers-list", "1,2",
                 "--fractions", "0.5", "--backends", "numba,sklearn,cupy", "--device", "cpu",
                 "--repeats", "1", "--quiet", "--dashboard-address", ":0",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "wrote" in text and "cupy needs GPU workers" in text
    with open(out / "results.csv") as f:
        table = list(csv.DictReader(f))
    assert [(r["backend"], r["workers"]) for r in table] == [
        ("numba", "1"), ("sklearn", "1"), ("cupy", "1"),
        ("numba", "2"), ("sklearn", "2"), ("cupy", "2")]
    ok = [r for r in table if r["status"] == "ok"]
    assert all(float(r["accuracy"]) > 0.95 and float(r["warm_total"]) > 0 for r in ok)
    assert (out / "knn_time_vs_size.png").exists() and (out / "bench.html").exists()
    sk1, sk2 = (r for r in table if r["backend"] == "sklearn")
    assert sk1["note"] == "" and "once per size (measured with workers=1)" in sk2["note"]
    assert sk1["warm_total"] == sk2["warm_total"]  # one CPU run, not two

    # --append: a second sweep adds its rows and redoes only its own combinations;
    # --cpu-max-train turns scikit-learn into one "skipped" row.
    assert main(["bench", "--dataset", "digits", "--tasks", "logreg", "--workers-list", "1",
                 "--fractions", "0.5", "--backends", "numba,sklearn", "--device", "cpu",
                 "--repeats", "1", "--quiet", "--dashboard-address", ":0", "--append",
                 "--cpu-max-train", "100", "--out", str(out)]) == 0
    result = json.loads((out / "results.json").read_text())
    assert [(r["task"], r["backend"], r["workers"]) for r in result["rows"]] == [
        ("knn", "numba", 1), ("knn", "sklearn", 1), ("knn", "cupy", 1),
        ("knn", "numba", 2), ("knn", "sklearn", 2), ("knn", "cupy", 2),
        ("logreg", "numba", 1), ("logreg", "sklearn", 1)]
    assert re.fullmatch(r"skipped: \d+ training rows > --cpu-max-train 100",
                        result["rows"][-1]["status"])
    assert len(result["commands"]) == 2 and "--append" in result["command"]
    assert (out / "logreg_time_vs_gpus.png").exists() and (out / "knn_time_vs_gpus.png").exists()


@pytest.mark.parametrize("argv, match", [
    (["--tasks", "svm"], "--tasks 'svm'"),
    (["--backends", "jax"], "--backends 'jax'"),
    (["--workers-list", "1,two"], "comma-separated list of int"),
])
def test_bench_bad_arguments(capsys, argv, match):
    assert main(["bench", "--dataset", "digits", "--quiet", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and match in err


def test_merge_rows_replaces_one_backend_and_recomputes_speedups():
    from mgpu_dask.jobs.bench import merge_rows

    def row(backend, workers, status="ok", total=1.0):
        return {"task": "knn", "backend": backend, "workers": workers, "fraction": 1.0,
                "status": status, "warm_total": total if status == "ok" else None,
                "speedup_vs_cuml": None}

    previous = [row("numba", 2, total=0.5), row("cupy", 2, "failed: boom"), row("cuml", 2, total=2.0),
                row("cupy", 4, total=9.0)]
    merged = merge_rows(previous, [row("cupy", 2, total=4.0)])
    by = {(r["backend"], r["workers"]): r for r in merged}
    assert len(merged) == 4 and by[("cupy", 2)]["status"] == "ok"
    assert by[("cupy", 2)]["speedup_vs_cuml"] == 0.5 and by[("numba", 2)]["speedup_vs_cuml"] == 4.0
    assert by[("cupy", 4)]["speedup_vs_cuml"] is None  # no cuML row at 4 workers
