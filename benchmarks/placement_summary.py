"""Summarise fresh-process runs for the placement benchmark (issue 23).

Reads the ``--json`` files of repeated ``knn`` / ``logreg`` runs and writes
one JSON: per run, every holder of every shard, the placement problems the
run reported, and its warm time; over the runs, whether every shard had
exactly one holder in all of them and the slowest warm time over the median.

    python benchmarks/placement_summary.py RUN.json ... --command "..." --out FILE
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("runs", nargs="+")
    p.add_argument("--command", required=True, help="the command each run was")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    runs = [json.loads(Path(f).read_text()) for f in args.runs]
    task = runs[0]["task"]
    key = "warm_predict_median" if task == "knn" else "warm_fit_predict_median"
    rows = []
    for r in runs:
        holders = {what: {str(b["index"]): sorted(x["worker"] for x in blocks
                                                 if x["index"] == b["index"])
                          for b in blocks} for what, blocks in r["placement"].items()}
        clean = not r["placement_problems"] and all(
            len(w) == 1 for blocks in holders.values() for w in blocks.values())
        rows.append({"clean": clean, "problems": r["placement_problems"], "holders": holders,
                     "warm_seconds": r[key], "accuracy": r["accuracy"]})
    times = [row["warm_seconds"] for row in rows]
    median = statistics.median(times)
    out = {"benchmark": "placement: every shard on exactly one worker, in fresh processes",
           "task": task, "command": args.command, "machine": runs[0]["machine"],
           "runs": len(rows), "clean_runs": sum(row["clean"] for row in rows),
           "warm_median_s": median, "warm_slowest_s": max(times),
           "slowest_over_median": max(times) / median, "per_run": rows}
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(f"{task}: {out['clean_runs']} of {out['runs']} runs clean; warm median "
          f"{median * 1e3:.1f} ms, slowest {max(times) * 1e3:.1f} ms "
          f"({out['slowest_over_median']:.2f}x)")


if __name__ == "__main__":
    main()
