"""The side-by-side job: every backend on the same split and cluster, one row each."""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from .phases import Phases
from .session import Echo, notes, session, summary


def compare_job(task: str, backends: list[str], *, dataset: str | None = None,
                data_dir: str | None = None, download: bool = True, fraction: float = 1.0,
                test_size: float = 0.25, seed: int = 0, options: dict[str, Any] | None = None,
                cluster_options: dict[str, Any] | None = None, report: str | None = None,
                echo: Echo | None = None, copies: int | None = None,
                deformation: str | None = None,
                classes: list[int] | None = None) -> dict[str, Any]:
    """Every requested backend on the same split and cluster: one row each.

    Each row times its fit and predict on rows already where they compute (its
    ``timed`` says where: through Dask from the client, inside one worker, or on
    the client's CPU), and the placement of those rows from the client apart
    (``placing``); ``warm_total`` is the first, ``placed_total`` both.  The
    speed-ups against cuML's multi-GPU row compare like with like:
    ``speedup_vs_cuml`` the resident totals, ``speedup_vs_cuml_placed`` the
    placed ones.  A backend that cannot run here, or fails, is one row with its
    reason.
    """
    from ..compare import BackendRun, BackendSkipped, module, unavailable

    say = echo or (lambda message: None)
    phases = Phases(say)
    with session(task, phases, dataset=dataset, data_dir=data_dir, download=download,
                 fraction=fraction, test_size=test_size, seed=seed,
                 cluster_options=cluster_options, report=report, say=say,
                 copies=copies, deformation=deformation, classes=classes) as s:
        device = "gpu" if s.cluster.plan.device == "gpu" else "cpu"
        run = BackendRun(s.data, s.cluster.client, device, dict(options or {}), s.wait_timeout)
        rows = []
        predictions: dict[str, Any] = {}  # each row's last test predictions (not written)
        for name in backends:
            reason = unavailable(name, device)
            if reason is None:
                say(f"[backend] {name}")
                try:
                    out = getattr(module(name), task)(run)
                except BackendSkipped as exc:
                    reason = f"skipped: {exc}"
                except Exception as exc:  # one line in the table, never a crash of the comparison
                    reason = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            if reason is not None:
                rows.append({"backend": name, "status": reason})
                continue
            warm = {k: statistics.median(r[k] for r in out["warm"]) for k in ("fit", "predict")}
            predictions[name] = out.get("predictions")
            total = warm["fit"] + warm["predict"]
            placing = float(out.get("placing", 0.0))
            rows.append({"backend": name, "status": "ok", "note": out.get("note"),
                         "accuracy": out["cold"]["accuracy"], "cold": out["cold"], "warm": warm,
                         "warm_total": total, "placing": placing,
                         "placed_total": total + placing, "timed": out.get("timed")})
        reference = next((r for r in rows if r["backend"] == "cuml" and r["status"] == "ok"), None)
        exact = predictions.get("sklearn")
        for r in rows:
            if r["status"] == "ok" and reference:
                r["speedup_vs_cuml"] = reference["warm_total"] / r["warm_total"]
                r["speedup_vs_cuml_placed"] = reference["placed_total"] / r["placed_total"]
            mine = predictions.get(r["backend"])
            if r["status"] == "ok" and exact is not None and mine is not None:
                r["differ_from_sklearn"] = int((np.asarray(mine) != exact).sum())
        return {**summary(s, task, fraction, seed), "options": options, "device": device,
                "classes": classes, "setup": phases.seconds, "backends": rows,
                "notes": notes(s)}
