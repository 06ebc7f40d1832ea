"""Scaling plots of a workflow sweep: warm time against GPUs and against training rows.

Reads the JSON that ``python -m mgpu_dask.run workflow FILE --json OUT`` writes
(a sweep over ``copies`` and ``workers``, e.g. workflows/deformed-scaling.yaml)
and draws, per task, time against GPUs (one line per size, ideal scaling from
one GPU dashed) and time against training rows (one line per GPU count,
linear growth from the smallest size dashed).  Also prints the table.

    python benchmarks/plot_scaling.py knn.json logreg.json --out scaling.png
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

WARM = {"knn": ("warm_predict_median", "warm predict"),
        "logreg": ("warm_fit_predict_median", "warm fit + predict")}


def points(files: list[Path]) -> dict[str, dict[tuple[int, int], float]]:
    """{task: {(rows, workers): seconds}} from the runs that succeeded."""
    out: dict[str, dict[tuple[int, int], float]] = defaultdict(dict)
    for f in files:
        for run in json.loads(f.read_text())["runs"]:
            key = WARM.get(run.get("task"), (None,))[0]
            if key and run.get(key) is not None:
                out[run["task"]][(int(run["n_train"]), int(run["workers"]))] = float(run[key])
    return out


def table(data: dict[str, dict[tuple[int, int], float]]) -> str:
    lines = ["| task | training rows | GPUs | warm seconds | speed-up vs 1 GPU |",
             "|---|---|---|---|---|"]
    for task, runs in data.items():
        for (rows, w), t in sorted(runs.items()):
            one = runs.get((rows, 1))
            speed = f"{one / t:.2f}x" if one else "-"
            lines.append(f"| {task} | {rows:,} | {w} | {t:.4f} | {speed} |")
    return "\n".join(lines)


def plot(data: dict[str, dict[tuple[int, int], float]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(data)
    fig, axes = plt.subplots(len(tasks), 2, figsize=(11, 4.2 * len(tasks)), squeeze=False)
    for row, task in zip(axes, tasks):
        runs = data[task]
        sizes = sorted({r for r, _ in runs})
        gpus = sorted({w for _, w in runs})
        ax = row[0]
        for i, rows in enumerate(sizes):
            ws = [w for w in gpus if (rows, w) in runs]
            line, = ax.plot(ws, [runs[rows, w] for w in ws], "o-", label=f"{rows:,} rows")
            if (rows, 1) in runs:
                ax.plot(ws, [runs[rows, 1] / w for w in ws], "--", color=line.get_color(),
                        alpha=0.6)
        ax.set(xscale="log", yscale="log", xlabel="GPUs", ylabel=f"{WARM[task][1]} (s)",
               title=f"{task}: time against GPUs (dashed: ideal)")
        ax.set_xticks(gpus, [str(w) for w in gpus])
        ax.legend(fontsize=8)
        ax = row[1]
        for w in gpus:
            rs = [r for r in sizes if (r, w) in runs]
            line, = ax.plot(rs, [runs[r, w] for r in rs], "o-", label=f"{w} GPU(s)")
            if rs:
                ax.plot(rs, [runs[rs[0], w] * r / rs[0] for r in rs], "--",
                        color=line.get_color(), alpha=0.6)
        ax.set(xscale="log", yscale="log", xlabel="training rows",
               ylabel=f"{WARM[task][1]} (s)",
               title=f"{task}: time against rows (dashed: linear)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("json", nargs="+", type=Path)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    data = points(args.json)
    if not data:
        raise SystemExit("no successful knn or logreg runs in " + ", ".join(map(str, args.json)))
    print(table(data))
    plot(data, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
