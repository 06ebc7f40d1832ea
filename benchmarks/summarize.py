"""The results of a device call (``benchmarks/device.sh``) as committed JSON, and tables.

usage: python benchmarks/summarize.py RUNS_DIR OUT_DIR --commit SHA --made-by "PHASE=..."

Each CLI JSON of RUNS_DIR is copied to OUT_DIR with the commit it ran and the
device call that made it added; ``summary.json`` holds, per file, the figures
the README cites (warm medians, accuracy, what ran; ``host_fit.py``'s medians),
and the A/B ratios where ``ab_*`` files are present (``workers_*``: the means over
rounds per worker count, and their ratios to one worker; ``gpus_*``: the means per
GPU count, and the speed-ups over one GPU, per code where they are ``gpus_*_old|new_*``;
``precision_*``: the means per precision
and their ratios to bf16's; ``sizes_*``: the means per size and code, and new over old;
``host_fit_*``: the warm fits' means per code, and new over old; for ``gpus_logreg_*``, the
L-BFGS loop's too; ``knn_data``, ``logreg_data``: each case's rows).  The
tables print as Markdown.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any


def figures(result: dict[str, Any]) -> dict[str, Any]:
    """What one CLI result says in a table cell (the first-run file: its walls)."""
    if "rounds" in result:
        return {"walls": {r: {what: v["wall_seconds"] for what, v in runs.items()}
                          for r, runs in result["rounds"].items()}}
    if "warm_fit_median_ms" in result:  # benchmarks/host_fit.py: fits from host NumPy
        return {k: result[k] for k in ("dataset", "n_train", "workers", "warm_fit_median_ms",
                                       "warm_fit_back_to_back_median_ms", "parts_median_ms",
                                       "warm_shard_median_ms", "predictions_equal", "accuracy")
                if k in result}
    if "cases" in result:  # benchmarks/knn_data.py, logreg_data.py: own data, peers beside ours
        keep = ("predict_s", "first_predict_s", "fit_s", "first_fit_s", "fit_walls_s",
                "route_s", "recall", "iterations", "evaluations", "per_iteration_ms", "loss",
                "graph", "precision", "searches", "error")
        return {"workers": result.get("workers"), "cases": {
            c["case"]["name"]: {"rows": {r["backend"]: {k: r[k] for k in keep if k in r}
                                         for r in c["rows"]},
                                **{k: c[k] for k in ("fastest_faiss", "times_faiss") if k in c}}
            for c in result["cases"]}}
    if "crossings" in result:  # benchmarks/lbfgs_timeline_gpus.py: the L-BFGS under CUPTI
        return {k: result[k] for k in ("iterations", "span_per_iteration_us", "crossings")}
    if "backends" in result:  # --backend ...: one row per backend
        return {"task": result["task"], "n_train": result["n_train"], "n_test": result["n_test"],
                "rows": {r["backend"]: {k: r.get(k) for k in
                                        ("status", "accuracy", "warm", "warm_total", "timed",
                                         "differ_from_sklearn", "note")}
                         for r in result["backends"]}}
    warm = result.get("warm_predict_median", result.get("warm_fit_predict_median"))
    lbfgs = (result.get("fit_profile") or {}).get("L-BFGS")  # logreg: the loop alone
    return {"task": result["task"], "n_train": result["n_train"], "n_test": result["n_test"],
            "accuracy": result["accuracy"], "warm_seconds": warm,
            "precision": result.get("precision"), "cold": result.get("cold"),
            "warm_phases": result.get("warm"), **({"lbfgs_seconds": lbfgs} if lbfgs else {})}


def ab_ratios(summary: dict[str, Any]) -> dict[str, Any]:
    """Median warm seconds of the older and the newer code per task, and their ratio."""
    out = {}
    for task in ("knn", "logreg"):
        times = {code: [v["warm_seconds"] for k, v in summary.items()
                        if k.startswith(f"ab_{task}_{code}_")] for code in ("old", "new")}
        if times["old"] and times["new"]:
            old, new = statistics.median(times["old"]), statistics.median(times["new"])
            out[task] = {"old_seconds": times["old"], "new_seconds": times["new"],
                         "old_median": old, "new_median": new, "new_over_old": new / old}
    return out


def _round_means(summary: dict[str, Any], pattern: str, label: Any, ratio_label: Any,
                 ratio: Any, base: str = "1", digits: int = 2) -> dict[str, float]:
    """Means over rounds, ms, of the runs whose names match ``pattern`` (named groups:
    ``task``, ``kind`` and ``x``, what is compared), labelled ``label(task, kind, x)``;
    then, for each ``x`` other than ``base``, ``ratio(mean, mean of base)`` labelled
    ``ratio_label(task, kind, x)``."""
    import re

    runs: dict[tuple[str, str, str], list[float]] = {}
    for name, s in summary.items():
        m = re.fullmatch(pattern, name)
        if m and s.get("warm_seconds") is not None:
            runs.setdefault((m["task"], m["kind"], m["x"]), []).append(1e3 * s["warm_seconds"])
    means = {key: statistics.mean(times) for key, times in sorted(runs.items())}
    out = {label(*key): round(mean, 1) for key, mean in means.items()}
    for (task, kind, x), mean in means.items():
        first = means.get((task, kind, base))
        if x != base and first:
            out[ratio_label(task, kind, x)] = round(ratio(mean, first), digits)
    return out


def worker_means(summary: dict[str, Any]) -> dict[str, float]:
    """Means over rounds of ``workers_TASK_CODE_nN_I`` (``PHASE=workers-ab``), ms, and each
    count's ratio to one worker of the same code."""
    return _round_means(summary, r"workers_(?P<task>knn|logreg)_(?P<kind>old|new)_n(?P<x>\d+)_\d+",
                        lambda task, code, n: f"{task}, {n} workers on one GPU, {code}",
                        lambda task, code, n: f"{task}, {n} workers / 1 worker, {code} (ratio)",
                        lambda mean, one: mean / one)


def gpu_means(summary: dict[str, Any]) -> dict[str, float]:
    """Means over rounds of ``gpus_TASK_SIZE_nN_I`` (``PHASE=gpus``, one worker per GPU),
    ms, and each size's speed-up on N GPUs over one."""
    return _round_means(summary,
                        r"gpus_(?P<task>knn|logreg)_(?P<kind>f\d+|deformed)_n(?P<x>\d+)_\d+",
                        lambda task, size, n: f"{task} {size}, {n} GPUs",
                        lambda task, size, n: f"{task} {size}, speed-up on {n} GPUs (ratio)",
                        lambda mean, one: one / mean)


def gpu_ab_means(summary: dict[str, Any]) -> dict[str, float]:
    """Means over rounds of ``gpus_TASK_SIZE_nN_CODE_I`` (``PHASE=gpus-ab``), ms, and each
    code's speed-up on N GPUs over its own one-GPU runs (over the working tree's where
    one GPU ran only those: ``OLD_ON_ONE`` unset, the path both share)."""
    import re

    runs: dict[tuple[str, str, str, str], list[float]] = {}
    for name, s in summary.items():
        m = re.fullmatch(r"gpus_(?P<task>knn|logreg)_(?P<size>f\d+|deformed)_n(?P<n>\d+)_"
                         r"(?P<code>old|new)_\d+", name)
        if m and s.get("warm_seconds") is not None:
            runs.setdefault((m["task"], m["size"], m["n"], m["code"]), []).append(
                1e3 * s["warm_seconds"])
    means = {key: statistics.mean(times) for key, times in sorted(runs.items())}
    out = {f"{task} {size}, {n} GPUs, {code}": round(mean, 1)
           for (task, size, n, code), mean in means.items()}
    for (task, size, n, code), mean in means.items():
        one = means.get((task, size, "1", code), means.get((task, size, "1", "new")))
        if n != "1" and one:
            out[f"{task} {size}, speed-up on {n} GPUs, {code} (ratio)"] = round(one / mean, 2)
    return out


def _code_means(runs: dict[tuple[str, str, str], list[float]],
                label: Any) -> dict[str, float]:
    """Means of ``runs`` (keyed ``(a, b, code)``), labelled ``label(a, b, code)``, and the
    newer code's over the older's, labelled ``label(a, b, "new / old (ratio)")``."""
    means = {key: statistics.mean(times) for key, times in sorted(runs.items())}
    out = {label(*key): round(mean, 2) for key, mean in means.items()}
    for (a, b, code), mean in means.items():
        old = means.get((a, b, "old"))
        if code == "new" and old:
            out[label(a, b, "new / old (ratio)")] = round(mean / old, 3)
    return out


def loop_ab_means(summary: dict[str, Any]) -> dict[str, float]:
    """Means over rounds of the L-BFGS loop alone (``fit_profile``'s "L-BFGS": the device
    loop, no Dask, no predict) in ``gpus_logreg_SIZE_nN_CODE_I``, ms, and new over old."""
    import re

    runs: dict[tuple[str, str, str], list[float]] = {}
    for name, s in summary.items():
        m = re.fullmatch(r"gpus_logreg_(?P<size>f\d+|deformed)_n(?P<n>\d+)_(?P<code>old|new)_\d+",
                         name)
        if m and s.get("lbfgs_seconds") is not None:
            runs.setdefault((m["size"], m["n"], m["code"]), []).append(1e3 * s["lbfgs_seconds"])
    return _code_means(runs, lambda size, n, code: f"logreg {size}, {n} GPUs, L-BFGS loop, {code}")


def size_means(summary: dict[str, Any]) -> dict[str, float]:
    """Means over rounds of ``sizes_TASK_SIZE_CODE_I`` (``PHASE=sizes-ab``), ms, and the
    newer code's time over the older's at each size."""
    return _round_means(summary,
                        r"sizes_(?P<task>knn|logreg)_(?P<kind>f\d+|deformed)_(?P<x>old|new)_\d+",
                        lambda task, size, code: f"{task} {size}, {code}",
                        lambda task, size, code: f"{task} {size}, new / old (ratio)",
                        lambda mean, old: mean / old, base="old", digits=3)


def precision_means(summary: dict[str, Any]) -> dict[str, float]:
    """Means over rounds of ``precision_TASK_PRECISION_SIZE_I`` (``PHASE=precisions``), ms,
    and each precision's time over bf16's (the tile loop) at the same size."""
    return _round_means(summary, r"precision_(?P<task>knn|logreg)_(?P<x>[a-z0-9]+)_"
                                 r"(?P<kind>f\d+|deformed)_\d+",
                        lambda task, size, p: f"{task} {size}, {p}",
                        lambda task, size, p: f"{task} {size}, {p} / bf16 (ratio)",
                        lambda mean, bf16: mean / bf16, base="bf16", digits=3)


def host_fit_means(summary: dict[str, Any]) -> dict[str, float]:
    """Means over rounds of ``host_fit_CODE_n1_I`` (``PHASE=host-fit-ab``), ms: the warm fit
    through shared memory (alternating with fits that carry the rows in the graph), back
    to back where measured, ``shard`` of the same rows through shared memory, and the
    newer code's over the older's."""
    import re

    runs: dict[tuple[str, str], list[float]] = {}
    for name, s in summary.items():
        m = re.fullmatch(r"host_fit_(?P<code>old|new)_n\d+_\d+", name)
        if not m:
            continue
        runs.setdefault(("alternating", m["code"]), []).append(
            s["warm_fit_median_ms"]["shared memory"])
        runs.setdefault(("shard", m["code"]), []).append(
            s["warm_shard_median_ms"]["shared memory"])
        if s.get("warm_fit_back_to_back_median_ms") is not None:
            runs.setdefault(("back to back", m["code"]), []).append(
                s["warm_fit_back_to_back_median_ms"])
    out: dict[str, float] = {}
    for (way, code), times in sorted(runs.items()):
        out[f"host fit, {way}, {code}"] = round(statistics.mean(times), 2)
    for way in ("alternating", "back to back", "shard"):
        old, new = out.get(f"host fit, {way}, old"), out.get(f"host fit, {way}, new")
        if old and new:
            out[f"host fit, {way}, new / old (ratio)"] = round(new / old, 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--commit", required=True)
    parser.add_argument("--made-by", required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {}
    machine = None
    for path in sorted(args.runs.glob("*.json")):
        result = json.loads(path.read_text())
        result.update(commit=args.commit, made_by=args.made_by)
        (args.out / path.name).write_text(json.dumps(result, indent=2) + "\n")
        summary[path.stem] = {"command": result.get("command"), **figures(result)}
        machine = machine or result.get("machine")
    payload = {"machine": machine, "commit": args.commit, "made_by": args.made_by,
               "runs": summary, "ab": ab_ratios(summary)}
    means = {**worker_means(summary), **gpu_means(summary), **gpu_ab_means(summary),
             **precision_means(summary), **size_means(summary), **host_fit_means(summary),
             **loop_ab_means(summary)}
    if means:
        payload["means_over_rounds_ms"] = means
    (args.out / "summary.json").write_text(json.dumps(payload, indent=2) + "\n")
    for name, s in summary.items():
        if "walls" in s:
            for rnd, walls in s["walls"].items():
                print(f"{name} {rnd}: " + ", ".join(f"{w} {v:.1f} s" for w, v in walls.items()))
        elif "rows" in s:
            print(f"\n{name}: {s['task']}, train {s['n_train']}\n")
            print("| backend | accuracy | warm fit | warm predict | timed |")
            print("|---|---|---|---|---|")
            for backend, r in s["rows"].items():
                if r["status"] != "ok":
                    print(f"| {backend} | {r['status']} | | | |")
                    continue
                print(f"| {backend} | {r['accuracy']:.4f} | {1e3 * r['warm']['fit']:.1f} ms | "
                      f"{1e3 * r['warm']['predict']:.1f} ms | {r.get('timed') or ''} |")
        elif "knn search" in s:
            print(f"{name}: " + ", ".join(f"{what} wall {r['wall_ms_median']} ms, kernels "
                                          f"{r['device_ms_total']} ms" for what, r in s.items()
                                          if isinstance(r, dict)))
        elif "mismatches" in s:
            print(f"{name}: {s['mismatches']} mismatches; " + ", ".join(
                f"{frac} {label} {r['ms']} ms" for frac, row in s.items()
                if frac.startswith("fraction_") for label, r in row.items() if isinstance(r, dict)))
        elif "warm_fit_median_ms" in s:
            print(f"{name}: {s['workers']} workers, warm fit from host NumPy (ms) "
                  f"{s['warm_fit_median_ms']}, shard {s['warm_shard_median_ms']}")
        elif "crossings" in s:
            print(f"{name}: {s['span_per_iteration_us']} us per iteration, {s['crossings']}")
        elif "cases" in s:  # own data: each backend's warm time per case
            for case, c in s["cases"].items():
                print(f"{name} {case}: " + ", ".join(
                    f"{b} " + (f"{1e3 * r['predict_s']:.1f} ms" if "predict_s" in r else
                               f"{r.get('per_iteration_ms', float('nan')):.3f} ms/it")
                    for b, r in c["rows"].items()))
        elif "rows" in s:  # --backend: one row per backend
            print(f"{name}: " + ", ".join(f"{b} {r['status']}" for b, r in s["rows"].items()))
        else:
            print(f"{name}: {s['task']} accuracy {s['accuracy']:.4f}, warm "
                  f"{1e3 * s['warm_seconds']:.1f} ms ({s['precision']})")
    for what, ms in means.items():
        print(f"{what}: {ms}")
    for task, r in payload["ab"].items():
        print(f"A/B {task}: old {1e3 * r['old_median']:.1f} ms, new {1e3 * r['new_median']:.1f} ms"
              f" ({r['new_over_old']:.3f}x)")


if __name__ == "__main__":
    main()
