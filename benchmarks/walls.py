"""Process walls of first and later runs against the bare cluster, as committed JSON.

usage: python benchmarks/walls.py RUNS_DIR OUT_DIR --kind first|later --commit SHA
                                  --old SHA --device "..." --made-by "..."

RUNS_DIR holds ``walls.txt`` (``name seconds rc`` per process) and the runs'
``--json`` files, as ``.ab/ab.sh``-style later runs (``floor_I``,
``TASK_CODE_I``) or ``device.sh``'s ``PHASE=first-ab`` (``floor_CODE_ROUND``,
``TASK_CODE_RUN_ROUND``) write them; CODE is ``old`` (``--old``) or ``new``
(``--commit``).  ``summary.json`` holds every wall, the medians, each run over
the floor of its own round, and each run's cold phases from the process start.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
from pathlib import Path
from typing import Any

TASKS = ("knn", "logreg")
COMMANDS = ["python3 /tmp/floor.py (bare LocalCUDACluster + one CuPy task + close)",
            "python3 -m mgpu_dask.run knn --workers 1 --json ...",
            "python3 -m mgpu_dask.run logreg --workers 1 --json ..."]


def read_walls(path: Path) -> dict[str, float]:
    walls = {}
    for line in path.read_text().split("\n"):
        parts = line.split()
        if len(parts) == 3 and parts[2] == "0":
            walls[parts[0]] = round(float(parts[1]), 3)
    return walls


def timeline(result: dict[str, Any]) -> dict[str, Any]:
    """When the cluster was asked and ready, when the client began to load (its imports
    done), and when the job was done, in seconds from the process start."""
    process = result.get("process") or {}
    windows = process.get("cold phases from process start") or {}

    def first(name: str, end: int) -> float | None:
        spans = windows.get(name)
        return spans[0][end] if spans else None

    return {"cluster asked": first("cluster start", 0), "cluster ready": first("cluster start", 1),
            "compile": windows.get("compile"),
            "client imports done (load began)": first("load", 0),
            "job done": process.get("job done from process start")}


def later(walls: dict[str, float], rounds: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"process_wall_seconds": {"floor": [walls[f"floor_{i}"] for i in rounds]}}
    for task in TASKS:
        for code in ("old", "new"):
            out["process_wall_seconds"][f"{task}_{code}"] = [walls[f"{task}_{code}_{i}"]
                                                             for i in rounds]
    out["medians"] = {k: round(statistics.median(v), 3)
                      for k, v in out["process_wall_seconds"].items()}
    out["over_the_floor_of_the_same_round_median"] = {
        f"{task} {code}": round(statistics.median(
            walls[f"{task}_{code}_{i}"] - walls[f"floor_{i}"] for i in rounds), 3)
        for task in TASKS for code in ("old", "new")}
    out["paired_new_minus_old_median"] = {
        task: round(statistics.median(walls[f"{task}_new_{i}"] - walls[f"{task}_old_{i}"]
                                      for i in rounds), 3) for task in TASKS}
    return out


def first(walls: dict[str, float], old: str, new: str) -> dict[str, Any]:
    rounds = sorted({name.split("_")[-1] for name in walls if name.startswith("floor_old_")})
    runs = [f"{task} {run}" for task in TASKS for run in ("first", "second")]

    def row(code: str, r: str) -> dict[str, float]:
        return {"floor": walls[f"floor_{code}_{r}"],
                **{what: walls[f"{what.replace(' ', f'_{code}_')}_{r}"] for what in runs}}

    out: dict[str, Any] = {}
    if "floor_new_fresh" in walls:
        fresh = row("new", "fresh")
        out[f"fresh machine, {new} (first call of the lease, default caches)"] = fresh
        out["fresh machine, seconds over the floor of the same round"] = {
            what: round(fresh[what] - fresh["floor"], 2) for what in runs}
    for code, ref in (("old", old), ("new", new)):
        rows = [row(code, r) for r in rounds]
        out[f"empty Numba, CuPy and driver caches, {ref} ({code}), rounds {', '.join(rounds)}"] = {
            "walls": {what: [x[what] for x in rows] for what in ("floor", *runs)},
            "over the floor of the same round": {
                what: [round(x[what] - x["floor"], 2) for x in rows] for what in runs}}
    return {"process_wall_seconds": out}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("runs", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--kind", choices=("first", "later"), required=True)
    parser.add_argument("--commit", required=True)
    parser.add_argument("--old", required=True)
    parser.add_argument("--device", required=True)
    parser.add_argument("--made-by", required=True)
    args = parser.parse_args()
    walls = read_walls(args.runs / "walls.txt")
    results = {p.stem: json.loads(p.read_text()) for p in sorted(args.runs.glob("*.json"))}
    args.out.mkdir(parents=True, exist_ok=True)
    for name in results:
        shutil.copy(args.runs / f"{name}.json", args.out / f"{name}.json")
    shutil.copy(args.runs / "walls.txt", args.out / "walls.txt")
    machine = next((r["machine"] for r in results.values() if "machine" in r), None)
    summary: dict[str, Any] = {"machine": machine, "device": args.device, "commit": args.commit,
                               "old": args.old, "made_by": args.made_by, "commands": COMMANDS}
    if args.kind == "later":
        rounds = sorted((n.split("_")[1] for n in walls if n.startswith("floor_")), key=int)
        summary.update(later(walls, rounds))
    else:
        summary.update(first(walls, args.old, args.commit))
    summary["new_timelines_seconds_from_process_start"] = {
        name: timeline(r) for name, r in results.items() if "_new_" in name}
    summary["cold_transfer_seconds"] = {name: round(r["cold"]["transfer"], 3)
                                        for name, r in results.items()
                                        if "transfer" in (r.get("cold") or {})}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: v for k, v in summary.items()
                      if k not in ("new_timelines_seconds_from_process_start",
                                   "cold_transfer_seconds")}, indent=1))


if __name__ == "__main__":
    main()
