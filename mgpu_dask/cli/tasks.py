"""The timed jobs on the command line: ``knn``, ``logreg`` (ours, or backends side by side)
and the ``bench`` sweep."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..compare import BACKENDS
from ..exceptions import MgpuDaskError
from ..jobs.options import cluster_kwargs, run_comparison, run_task
from .commands import dry_run
from .printing import print_comparison, print_job


def cmd_task(args: argparse.Namespace) -> int:
    from ..data.files import write_json

    if dry_run(args):
        return 0
    if args.backend != "numba":
        result = run_comparison(args)
        print_comparison(result)
    else:
        result = run_task(args)
        result["process"] = process_timeline(args, result.pop("cold_windows", {}))
        print_job(result)
    if args.json:
        write_json(args.json, result)
        print(f"wrote {args.json}")
    return 0


def process_timeline(args: argparse.Namespace, windows: dict) -> dict:
    """When the process started its command, ran each cold phase and finished the job
    (its cluster closed), in seconds from the process's start: where a run's wall time
    went beyond its phases (imports, waits, the cluster's shutdown)."""
    import time

    out: dict = {"interpreter start to command": args.startup_seconds}
    started = getattr(args, "process_started", None)
    if started is None:
        return out
    out["cold phases from process start"] = {
        name: [[round(a - started, 3), round(b - started, 3)] for a, b in spans]
        for name, spans in windows.items()}
    out["job done from process start"] = round(time.time() - started, 3)
    return out


def _list(text: str, kind: type) -> list:
    try:
        return [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise MgpuDaskError(f"{text!r} is not a comma-separated list of {kind.__name__}") from None


def cmd_bench(args: argparse.Namespace) -> int:
    import time

    from ..jobs.bench import merge_rows, run_sweep, write_outputs
    from ..jobs.machine import machine
    from ..jobs.session import report_file

    if args.replot:
        return _replot(Path(args.out))
    tasks = _list(args.tasks, str)
    for task in tasks:
        if task not in ("knn", "logreg"):
            raise MgpuDaskError(f"--tasks {task!r}: choose from knn, logreg")
    backends = list(BACKENDS) if args.backends == "all" else _list(args.backends, str)
    for name in backends:
        if name not in BACKENDS:
            raise MgpuDaskError(f"--backends {name!r}: choose from {', '.join(BACKENDS)} or all")
    cpu = {"cpu_max_train": args.cpu_max_train}
    options = {"knn": {"k": args.k, "weights": args.weights, "repeats": args.repeats, **cpu},
               "logreg": {"C": args.C, "max_iter": args.max_iter, "tol": 1e-4,
                          "comm": args.comm, "repeats": args.repeats, **cpu}}
    out = Path(args.out)
    previous: dict = {}
    if args.append and (out / "results.json").exists():
        previous = json.loads((out / "results.json").read_text())
    kwargs = cluster_kwargs(args)
    kwargs.pop("workers")
    data = dict(dataset=args.dataset, data_dir=args.data_dir, download=not args.no_download,
                test_size=args.test_size, seed=args.seed)
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    with report_file(args.report):
        rows = run_sweep(tasks, _list(args.workers_list, int), _list(args.fractions, float),
                         backends, options=options, cluster_options=kwargs, data=data,
                         progress=not args.quiet)
    command = args.command_line
    meta = {"command": command, "commands": [*previous.get("commands", []), command],
            "machine": machine(), "started": previous.get("started", started)}
    rows = merge_rows(previous.get("rows", []), rows)
    for path in write_outputs(rows, out, meta):
        print(f"wrote {path}")
    ok = [r for r in rows if r["status"] == "ok"]
    for r in ok:
        print(f"{r['task']:<7} {r['backend']:<12} workers {r['workers']:<2} fraction "
              f"{r['fraction']:<5} accuracy {r['accuracy']:.4f} warm {r['warm_total']:.3f} s")
    for r in rows:
        if r["status"] != "ok":
            print(f"{r['task']:<7} {r['backend']:<12} workers {r['workers']:<2} {r['status']}")
    return 0


def _replot(out: Path) -> int:
    """Write the CSV, the plots and the HTML page again from OUT/results.json."""
    from ..jobs.bench import write_outputs

    source = out / "results.json"
    try:
        saved = json.loads(source.read_text())
        rows = saved["rows"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise MgpuDaskError(f"--replot needs a bench results.json in {out} ({exc}); "
                            "point --out at a bench folder") from None
    meta = {k: v for k, v in saved.items() if k != "rows"}
    for path in write_outputs(rows, out, meta):
        print(f"wrote {path}")
    return 0
