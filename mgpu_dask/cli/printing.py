"""What the command line prints of a job's result: the summary and the side-by-side table."""

from __future__ import annotations

import sys

from ..jobs.transfers import human


def print_job(result: dict) -> None:
    """The human-readable summary of a job's result dictionary."""
    print(f"dataset {result['dataset']}: train {result['n_train']} x {result['n_features']}, "
          f"test {result['n_test']} (fraction {result['fraction']}, seed {result['seed']})")
    print(f"cluster: {result['cluster']}, {result['workers']} workers ({result['device']}); "
          f"dashboard {result['dashboard']}")
    for what, blocks in result.get("placement", {}).items():
        for s in blocks:
            print(f"  {what} {s['index']}: {s['rows']} rows on {s['worker']} "
                  f"as {s['array_type']} ({s['device']})")
    if result.get("placement_problems"):
        print("warning: placement: " + "; ".join(result["placement_problems"]), file=sys.stderr)
    if result["task"] == "knn":
        print(f"model: k={result['n_neighbors']}, weights={result['weights']}, "
              f"plan={result['plan']}, method={result['method']}, "
              f"precision={result['precision']} (neighbours {result['neighbours']})")
        if result.get("precision_note"):
            print(f"note: {result['precision_note']}", file=sys.stderr)
    else:
        print(f"model: C={result['C']}, iterations {result['n_iter']} (max {result['max_iter']}), "
              f"{result['evaluations']} evaluations, fit by {result['comm']} "
              f"({result['round_trips']} Dask round trips, L-BFGS on the "
              f"{result['optimizer']}), loss {result['loss']:.6f}"
              + (f", products {result['evaluation']}" if result.get("evaluation") else ""))
        if not result["converged"]:  # as scikit-learn says it, once
            print(f"note: the fit stopped before converging ({result['stop_reason']}, "
                  f"max_iter={result['max_iter']}): loss {result['loss']:.6f}, largest gradient "
                  f"entry {result['gradient_max']:.2e} > tol {result['tol']:g}; increase "
                  f"--max-iter to go further",
                  file=sys.stderr)
    repeated = (f" (rows repeated {result['fraction']:g}x: each neighbour counts "
                f"{result['fraction']:g} times, see fraction_note)"
                if result.get("fraction_note") else "")
    print(f"accuracy: {result['accuracy']:.4f}{repeated}")
    for run in ("cold", "warm"):
        phases = ", ".join(f"{k} {v:.3f}s" for k, v in result[run].items())
        print(f"{run}: {phases}")
    if result["task"] == "knn":
        print(f"warm predict (one graph, data resident), median of "
              f"{len(result['warm_predict_seconds'])}: {result['warm_predict_median'] * 1000:.1f} ms")
    else:
        print(f"warm fit+predict (data resident), median of "
              f"{len(result['warm_fit_predict_seconds'])}: "
              f"{result['warm_fit_predict_median'] * 1000:.1f} ms")
    moved = result.get("bytes_between_workers")
    if moved:
        parts = [f"{run} " + ", ".join(f"{k} {human(v)}" for k, v in moved[run].items())
                 for run in ("cold", "warm per repetition") if moved[run]]
        print(f"moved between workers ({result.get('protocol', 'tcp')}, Dask's transfer "
              f"records): " + "; ".join(parts))


def print_comparison(result: dict) -> None:
    print(f"{result['task']} on {result['dataset']}: train {result['n_train']}, test "
          f"{result['n_test']}; {result['workers']} {result['device']} workers")
    head = f"{'backend':<12} {'accuracy':>8} {'cold fit':>9} {'cold pred':>9} " \
           f"{'warm fit':>9} {'warm pred':>9} {'vs cuML':>8} {'!=sklearn':>9}"
    print(head)
    for r in result["backends"]:
        if r["status"] != "ok":
            print(f"{r['backend']:<12} {r['status']}")
            continue
        vs = f"{r['speedup_vs_cuml']:.2f}x" if "speedup_vs_cuml" in r else "n/a"
        differ = r.get("differ_from_sklearn", "n/a")
        print(f"{r['backend']:<12} {r['accuracy']:>8.4f} {r['cold']['fit']:>8.3f}s "
              f"{r['cold']['predict']:>8.3f}s {r['warm']['fit']:>8.3f}s "
              f"{r['warm']['predict']:>8.3f}s {vs:>8} {differ:>9}"
              + (f"  ({r['note']})" if r.get("note") else ""))
    if any("differ_from_sklearn" in r for r in result["backends"]):
        print("!=sklearn: test predictions that differ from the scikit-learn row's")
