"""The sweep behind ``python -m mgpu_dask.run bench``: tasks x workers x sizes x backends.

Each (task, workers, fraction) starts its own cluster and runs every backend on
the same split (``jobs.compare_job``).  CPU-only backends (scikit-learn) do not
use the workers, so they run once per (task, size) and their row is repeated
for the other worker counts, marked as such.  The rows are written as JSON and CSV,
with PNG plots (matplotlib) and one HTML page (bokeh): time against workers and
against training-set size, one line per backend, log scales.  Every file is
written under a temporary name and renamed into place.
"""

from __future__ import annotations

import csv
import io
import itertools
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

from .files import write_json, write_text_atomic

COLUMNS = ("task", "backend", "workers", "fraction", "n_train", "n_test", "status", "accuracy",
           "warm_fit", "warm_predict", "warm_total", "cold_fit", "cold_predict",
           "speedup_vs_cuml", "note")
CPU_BACKENDS = ("sklearn",)
# One colour per backend in every plot (matplotlib's and bokeh's category palette).
COLORS = {"numba": "#1f77b4", "cupy": "#ff7f0e", "cuml": "#2ca02c", "sklearn": "#d62728"}


def flatten(result: dict[str, Any], workers: int) -> list[dict[str, Any]]:
    """One flat row per backend of a ``compare_job`` result."""
    rows = []
    for r in result["backends"]:
        ok = r["status"] == "ok"
        rows.append({
            "task": result["task"], "backend": r["backend"], "workers": workers,
            "fraction": result["fraction"], "n_train": result["n_train"],
            "n_test": result["n_test"], "status": r["status"],
            "accuracy": r.get("accuracy"),
            "warm_fit": r["warm"]["fit"] if ok else None,
            "warm_predict": r["warm"]["predict"] if ok else None,
            "warm_total": r.get("warm_total"),
            "cold_fit": r["cold"]["fit"] if ok else None,
            "cold_predict": r["cold"]["predict"] if ok else None,
            "speedup_vs_cuml": r.get("speedup_vs_cuml"), "note": r.get("note"),
        })
    return rows


def _reuse_cpu_row(row: dict[str, Any], workers: int, reference: dict[str, Any] | None
                   ) -> dict[str, Any]:
    """A CPU backend's row for another worker count; speed-up against this run's cuML."""
    speedup = (reference["warm_total"] / row["warm_total"]
               if reference and row["status"] == "ok" else None)
    note = f"CPU run once per size (measured with workers={row['workers']})"
    return {**row, "workers": workers, "speedup_vs_cuml": speedup, "note": note}


def run_sweep(tasks: list[str], workers: list[int], fractions: list[float],
              backends: list[str], *, options: dict[str, dict[str, Any]],
              cluster_options: dict[str, Any], data: dict[str, Any],
              progress: bool = True) -> list[dict[str, Any]]:
    """Run every combination; a progress bar on stderr counts them."""
    from rich.progress import Progress

    from .jobs import compare_job

    combos = list(itertools.product(tasks, workers, fractions))
    rows: list[dict[str, Any]] = []
    cpu_rows: dict[tuple[str, float], dict[str, dict[str, Any]]] = {}
    with Progress(disable=not progress, transient=False) as bar:
        job = bar.add_task("bench", total=len(combos))
        for task, n_workers, fraction in combos:
            bar.update(job, description=f"{task} {n_workers} worker(s) fraction {fraction}")
            done = cpu_rows.setdefault((task, fraction), {})
            result = compare_job(task, [b for b in backends if b not in done], fraction=fraction,
                                 options=options[task],
                                 cluster_options={**cluster_options, "workers": n_workers},
                                 **data)
            fresh = {r["backend"]: r for r in flatten(result, n_workers)}
            reference = fresh.get("cuml") if fresh.get("cuml", {}).get("status") == "ok" else None
            for backend in backends:
                if backend in fresh:
                    rows.append(fresh[backend])
                    if backend in CPU_BACKENDS:
                        done[backend] = fresh[backend]
                else:
                    rows.append(_reuse_cpu_row(done[backend], n_workers, reference))
            bar.advance(job)
    return rows


def merge_rows(previous: list[dict[str, Any]], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Earlier rows (``--append``) that this sweep did not redo, then this sweep's rows.

    A row is one (task, backend, workers, fraction); speed-ups against cuML are
    recomputed from the merged cuML rows.
    """
    def key(r: dict[str, Any]) -> tuple:
        return r["task"], r["backend"], r["workers"], r["fraction"]

    redone = {key(r) for r in rows}
    merged = sorted([r for r in previous if key(r) not in redone] + rows,
                    key=lambda r: (r["task"], r["workers"], r["fraction"]))
    cuml = {(r["task"], r["workers"], r["fraction"]): r["warm_total"] for r in merged
            if r["backend"] == "cuml" and r["status"] == "ok"}
    for r in merged:
        reference = cuml.get((r["task"], r["workers"], r["fraction"]))
        r["speedup_vs_cuml"] = (reference / r["warm_total"]
                                if reference and r["status"] == "ok" else None)
    return merged


def write_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS)
    writer.writeheader()
    writer.writerows(rows)
    return write_text_atomic(path, buffer.getvalue())


def _series(rows: list[dict[str, Any]], task: str, x: str,
            fixed: Callable[[dict[str, Any]], bool]) -> dict[str, tuple[list, list]]:
    lines: dict[str, tuple[list, list]] = {}
    rank = {name: i for i, name in enumerate(COLORS)}  # legend order: numba, cupy, cuml, sklearn
    for r in sorted((r for r in rows if r["task"] == task and r["status"] == "ok" and fixed(r)),
                    key=lambda r: (rank.get(r["backend"], len(rank)), r[x])):
        xs, ys = lines.setdefault(r["backend"], ([], []))
        xs.append(r[x])
        ys.append(r["warm_total"])
    return lines


def _atomic_path(target: Path) -> tuple[Path, Path]:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.stem}.", suffix=target.suffix, dir=target.parent)
    os.close(fd)
    return target, Path(tmp)


def plot_png(rows: list[dict[str, Any]], out: Path) -> list[Path]:
    """Per task: warm time vs workers (largest data size) and vs training rows (most workers)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for task in sorted({r["task"] for r in rows}):
        mine = [r for r in rows if r["task"] == task]
        biggest = max(r["n_train"] for r in mine)
        widest = max(r["workers"] for r in mine)
        for name, x, fixed, label in (
                ("gpus", "workers", lambda r: r["n_train"] == biggest, "workers (GPUs)"),
                ("size", "n_train", lambda r: r["workers"] == widest, "training rows")):
            fig, ax = plt.subplots(figsize=(6, 4))
            for backend, (xs, ys) in _series(mine, task, x, fixed).items():
                ax.plot(xs, ys, marker="o", label=backend, color=COLORS.get(backend))
            ax.set_xscale("log", base=2 if name == "gpus" else 10)
            ax.set_yscale("log")
            ax.set_xlabel(label)
            ax.set_ylabel("warm fit + predict (s)")
            ax.set_title(f"{task}: time vs {label}")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend()
            target, tmp = _atomic_path(out / f"{task}_time_vs_{name}.png")
            fig.savefig(tmp, format="png", dpi=120, bbox_inches="tight")
            plt.close(fig)
            os.replace(tmp, target)
            written.append(target)
    return written


def plot_html(rows: list[dict[str, Any]], path: Path) -> Path:
    """One bokeh page with the same views, interactive."""
    from bokeh.embed import file_html
    from bokeh.layouts import gridplot
    from bokeh.palettes import Category10
    from bokeh.plotting import figure
    from bokeh.resources import CDN

    figures = []
    for task in sorted({r["task"] for r in rows}):
        mine = [r for r in rows if r["task"] == task]
        biggest = max(r["n_train"] for r in mine)
        widest = max(r["workers"] for r in mine)
        for x, fixed, label in (("workers", lambda r: r["n_train"] == biggest, "workers"),
                                ("n_train", lambda r: r["workers"] == widest, "training rows")):
            fig = figure(title=f"{task}: warm time vs {label}", x_axis_type="log",
                         y_axis_type="log", x_axis_label=label, y_axis_label="seconds",
                         width=480, height=320)
            for i, (backend, (xs, ys)) in enumerate(_series(mine, task, x, fixed).items()):
                color = COLORS.get(backend, Category10[10][i % 10])
                fig.line(xs, ys, legend_label=backend, color=color)
                fig.scatter(xs, ys, color=color)
            figures.append(fig)
    html = file_html(gridplot(figures, ncols=2), CDN, "mgpu_dask bench")
    return write_text_atomic(path, html)


def write_outputs(rows: list[dict[str, Any]], out: Path, meta: dict[str, Any]) -> list[Path]:
    """results.json, results.csv, bench.html and the PNG plots under ``out``."""
    paths = [write_json(out / "results.json", {**meta, "rows": rows}),
             write_csv(out / "results.csv", rows)]
    if any(r["status"] == "ok" for r in rows):
        paths.append(plot_html(rows, out / "bench.html"))
        paths.extend(plot_png(rows, out))
    return paths
