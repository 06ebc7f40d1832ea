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
from pathlib import Path
from typing import Any, Callable

from ..data.files import atomic_file, write_json, write_text_atomic

COLUMNS = ("task", "backend", "workers", "fraction", "n_train", "n_test", "status", "accuracy",
           "warm_fit", "warm_predict", "warm_total", "cold_fit", "cold_predict",
           "speedup_vs_cuml", "differ_from_sklearn", "note", "placing", "placed_total",
           "speedup_vs_cuml_placed", "timed")
CPU_BACKENDS = ("sklearn",)
# One colour per backend in every plot (matplotlib's and bokeh's category palette).
COLORS = {"numba": "#1f77b4", "cupy": "#ff7f0e", "cuml": "#2ca02c", "sklearn": "#d62728",
          "torch": "#9467bd", "cuml-single": "#8c564b", "cuvs": "#17becf", "cuda-c": "#e377c2",
          "torch-script": "#bcbd22", "faiss": "#7f7f7f"}


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
            "speedup_vs_cuml": r.get("speedup_vs_cuml"),
            "differ_from_sklearn": r.get("differ_from_sklearn"), "note": r.get("note"),
            "placing": r.get("placing"), "placed_total": r.get("placed_total"),
            "speedup_vs_cuml_placed": r.get("speedup_vs_cuml_placed"), "timed": r.get("timed"),
        })
    return rows


def _reuse_cpu_row(row: dict[str, Any], workers: int, reference: dict[str, Any] | None
                   ) -> dict[str, Any]:
    """A CPU backend's row for another worker count; speed-up against this run's cuML."""
    ok = reference is not None and row["status"] == "ok"
    speedup = reference["warm_total"] / row["warm_total"] if ok else None
    placed = reference["placed_total"] / row["placed_total"] if ok else None
    note = f"CPU run once per size (measured with workers={row['workers']})"
    return {**row, "workers": workers, "speedup_vs_cuml": speedup,
            "speedup_vs_cuml_placed": placed, "note": note}


def run_sweep(tasks: list[str], workers: list[int], fractions: list[float],
              backends: list[str], *, options: dict[str, dict[str, Any]],
              cluster_options: dict[str, Any], data: dict[str, Any],
              progress: bool = True) -> list[dict[str, Any]]:
    """Run every combination; a progress bar on stderr counts them."""
    from rich.progress import Progress

    from .compare import compare_job

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


LABELS = {"numba": "ours (Numba kernels)", "cupy": "plain CuPy", "cuml": "cuML multi-GPU (cuml.dask)",
          "sklearn": "scikit-learn (CPU)"}


def _series(rows: list[dict[str, Any]], task: str, x: str,
            fixed: Callable[[dict[str, Any]], bool]) -> dict[str, tuple[list, list]]:
    lines: dict[str, tuple[list, list]] = {}
    rank = {name: i for i, name in enumerate(COLORS)}  # legend order: that of COLORS
    for r in sorted((r for r in rows if r["task"] == task and r["status"] == "ok" and fixed(r)),
                    key=lambda r: (rank.get(r["backend"], len(rank)), r[x])):
        xs, ys = lines.setdefault(r["backend"], ([], []))
        xs.append(r[x])
        ys.append(r["warm_total"])
    return lines


def _ideal(lines: dict[str, tuple[list, list]]) -> tuple[list, list] | None:
    """Perfect scaling from ours at the fewest GPUs: time x fewest / GPUs."""
    if "numba" not in lines or len(lines["numba"][0]) < 2:
        return None
    xs, ys = lines["numba"]
    return list(xs), [ys[0] * xs[0] / x for x in xs]


def _views(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per task: time vs GPUs at the largest size, and time vs training rows at the most GPUs."""
    views = []
    for task in sorted({r["task"] for r in rows}):
        mine = [r for r in rows if r["task"] == task]
        biggest = max(r["n_train"] for r in mine)
        widest = max(r["workers"] for r in mine)
        for name, x, fixed, label, title in (
                ("gpus", "workers", lambda r, b=biggest: r["n_train"] == b, "GPUs (workers)",
                 f"{task}: warm time vs GPUs, {biggest:,} training rows"),
                ("size", "n_train", lambda r, w=widest: r["workers"] == w, "training rows",
                 f"{task}: warm time vs training rows, {widest} GPU{'s' if widest > 1 else ''}")):
            lines = _series(mine, task, x, fixed)
            ticks = sorted({v for xs, _ in lines.values() for v in xs})
            views.append({"task": task, "name": name, "label": label, "title": title,
                          "lines": lines, "ticks": ticks,
                          "ideal": _ideal(lines) if name == "gpus" else None})
    return views


def _seconds(value: float) -> str:
    """Plain tick text for a time axis: 0.05 s, 0.2 s, 1 s, 20 s."""
    return f"{value:g} s"


def plot_png(rows: list[dict[str, Any]], out: Path) -> list[Path]:
    """The views of :func:`_views` as PNG files, plain numbers on log axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter

    written = []
    for view in _views(rows):
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for backend, (xs, ys) in view["lines"].items():
            ax.plot(xs, ys, marker="o", label=LABELS.get(backend, backend),
                    color=COLORS.get(backend))
        if view["ideal"]:
            ax.plot(*view["ideal"], linestyle="--", color="0.5", label="ideal scaling of ours")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(FixedLocator(view["ticks"]))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _seconds(v)))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(view["label"])
        ax.set_ylabel("warm fit + predict")
        ax.set_title(view["title"])
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        target = out / f"{view['task']}_time_vs_{view['name']}.png"
        with atomic_file(target) as tmp:
            fig.savefig(tmp, format="png", dpi=120, bbox_inches="tight")
        plt.close(fig)
        written.append(target)
    return written


def plot_html(rows: list[dict[str, Any]], path: Path) -> Path:
    """One bokeh page with the same views, interactive."""
    from bokeh.embed import file_html
    from bokeh.layouts import gridplot
    from bokeh.models import FixedTicker, NumeralTickFormatter
    from bokeh.palettes import Category10
    from bokeh.plotting import figure
    from bokeh.resources import CDN

    figures = []
    for view in _views(rows):
        fig = figure(title=view["title"], x_axis_type="log", y_axis_type="log",
                     x_axis_label=view["label"], y_axis_label="warm fit + predict (s)",
                     width=520, height=340)
        for i, (backend, (xs, ys)) in enumerate(view["lines"].items()):
            color = COLORS.get(backend, Category10[10][i % 10])
            fig.line(xs, ys, legend_label=LABELS.get(backend, backend), color=color)
            fig.scatter(xs, ys, color=color)
        if view["ideal"]:
            fig.line(*view["ideal"], legend_label="ideal scaling of ours", color="gray",
                     line_dash="dashed")
        fig.xaxis.ticker = FixedTicker(ticks=view["ticks"])
        fig.xaxis.formatter = NumeralTickFormatter(format="0,0")
        fig.yaxis.formatter = NumeralTickFormatter(format="0.[000]")
        fig.legend.label_text_font_size = "8pt"
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
