"""Declarative sweeps: a YAML file names a task, fixed options and a sweep.

```yaml
name: knn-mnist
task: knn                 # knn or logreg
options: {dataset: mnist, k: 3, repeats: 3}
sweep: {fraction: [0.25, 1, 4]}
```

Option names are the CLI's (``k``, ``memory-budget`` or ``memory_budget``...).
Every combination of the sweep values is one run, in file order; cluster
options given on the command line (``--scheduler-file F``) apply to all runs.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
from pathlib import Path
from typing import Any, Callable, NamedTuple

import yaml

from ..exceptions import ClusterError, MgpuDaskError

TASKS = ("knn", "logreg")


class Workflow(NamedTuple):
    name: str
    task: str
    options: dict[str, Any]
    sweep: dict[str, list[Any]]


def load_workflow(path: str | Path) -> Workflow:
    """Read and check a workflow file; errors name the file and the key."""
    path = Path(path)
    try:
        spec = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise MgpuDaskError(f"workflow file {path} does not exist") from None
    except yaml.YAMLError as exc:
        raise MgpuDaskError(f"workflow file {path} is not valid YAML ({exc})") from None
    if not isinstance(spec, dict):
        raise MgpuDaskError(f"workflow file {path} must be a mapping with task, options, sweep")
    unknown = set(spec) - {"name", "task", "options", "sweep", "description"}
    if unknown:
        raise MgpuDaskError(f"workflow file {path}: unknown key(s) {sorted(unknown)}; "
                            "use name, description, task, options, sweep")
    task = spec.get("task")
    if task not in TASKS:
        raise MgpuDaskError(f"workflow file {path}: task {task!r} must be one of {TASKS}")
    options = spec.get("options") or {}
    sweep = spec.get("sweep") or {}
    if not isinstance(options, dict) or not isinstance(sweep, dict):
        raise MgpuDaskError(f"workflow file {path}: options and sweep must be mappings")
    sweep = {k: v if isinstance(v, list) else [v] for k, v in sweep.items()}
    return Workflow(str(spec.get("name") or path.stem), task, options, sweep)


def _argv(options: dict[str, Any]) -> list[str]:
    argv = []
    for key, value in options.items():
        flag = "--" + str(key).replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value not in (False, None):
            argv += [flag, str(value)]
    return argv


def expand(flow: Workflow) -> list[dict[str, Any]]:
    """One option dictionary per run: the fixed options plus one sweep combination."""
    keys = list(flow.sweep)
    return [{**flow.options, **dict(zip(keys, values))}
            for values in itertools.product(*(flow.sweep[k] for k in keys))]


def run_workflow(flow: Workflow, parser: argparse.ArgumentParser, *,
                 cluster_argv: list[str] | None = None,
                 echo: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Run every combination in order; return each run's result dictionary."""
    from .options import run_comparison, run_task

    runs = expand(flow)
    results = []
    for i, options in enumerate(runs, 1):
        argv = [flow.task, *_argv(options), "--quiet", *(cluster_argv or [])]
        errors = io.StringIO()
        try:
            with contextlib.redirect_stderr(errors):
                args = parser.parse_args(argv)
        except SystemExit:
            message = errors.getvalue().strip().splitlines()[-1:] or ["bad options"]
            raise MgpuDaskError(f"workflow {flow.name}: run {i} options {options} are not valid "
                                f"for {flow.task} ({message[0]})") from None
        if args.scheduler_address or args.scheduler_file or args.cluster != "local":
            if "workers" in flow.sweep:
                raise MgpuDaskError(f"workflow {flow.name} sweeps workers, which only a local "
                                    "cluster can vary; drop --scheduler-* / --cluster or the sweep")
        echo(f"[{i}/{len(runs)}] {flow.task} " + " ".join(f"{k}={v}" for k, v in options.items()))
        if args.backend != "numba":  # a side-by-side run: one line per backend
            result = run_comparison(args)
            for row in result["backends"]:
                echo(f"  {row['backend']:<8} " + (f"accuracy {row['accuracy']:.4f}, warm "
                     f"{row['warm_total'] * 1000:.1f} ms" if row["status"] == "ok"
                     else row["status"]))
        else:
            try:
                result = run_task(args)
            except ClusterError as exc:  # e.g. more GPUs asked for than this machine has
                echo(f"  error: {exc}")
                results.append({"options": options, "error": str(exc)})
                continue
            result.pop("cold_windows", None)  # wall-clock spans: the CLI's process timeline
            headline = result.get("warm_predict_median", result.get("warm_fit_predict_median"))
            echo(f"  accuracy {result['accuracy']:.4f}, warm {headline * 1000:.1f} ms, "
                 f"cold {result['cold']['total']:.2f} s, {result['workers']} workers")
        results.append({"options": options, **result})
    if results and all("error" in r for r in results):
        raise MgpuDaskError(f"workflow {flow.name}: every run failed; the first: "
                            f"{results[0]['error']}")
    return results
