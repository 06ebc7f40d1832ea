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
    for note in result.get("notes", ()):  # everything that fell back, once each
        print(f"note: {note}", file=sys.stderr)
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
              f"records and the straight predicts'): " + "; ".join(parts))


def print_comparison(result: dict) -> None:
    """The side-by-side table: every row's fit and predict on rows resident where they
    compute, the placement of those rows from the client apart, both totals, and the
    speed-ups against cuML's multi-GPU row for each total; then what each row times."""
    print(f"{result['task']} on {result['dataset']}: train {result['n_train']}, test "
          f"{result['n_test']}; {result['workers']} {result['device']} workers")
    print(f"{'':<12} {'':>8} {'-- rows resident --':^30} {'rows placed':>12} {'vs cuML':^15}")
    print(f"{'backend':<12} {'accuracy':>8} {'warm fit':>9} {'warm pred':>9} {'total':>9} "
          f"{'placing':>8} {'total':>8} {'resident':>7} {'placed':>7} {'!=sklearn':>9}")
    timed: dict[str, list[str]] = {}
    for r in result["backends"]:
        if r["status"] != "ok":
            print(f"{r['backend']:<12} {r['status']}")
            continue
        vs = (f"{r['speedup_vs_cuml']:>6.2f}x {r['speedup_vs_cuml_placed']:>6.2f}x"
              if "speedup_vs_cuml" in r else f"{'n/a':>7} {'n/a':>7}")
        differ = r.get("differ_from_sklearn", "n/a")
        print(f"{r['backend']:<12} {r['accuracy']:>8.4f} {r['warm']['fit']:>8.3f}s "
              f"{r['warm']['predict']:>8.3f}s {r['warm_total']:>8.3f}s "
              f"{r['placing']:>7.3f}s {r['placed_total']:>7.3f}s {vs} {differ:>9}"
              + (f"  ({r['note']})" if r.get("note") else ""))
        timed.setdefault(r.get("timed") or "(not said)", []).append(r["backend"])
    for where, names in timed.items():
        print(f"timed {where}: {', '.join(names)}")
    if any("differ_from_sklearn" in r for r in result["backends"]):
        print("!=sklearn: test predictions that differ from the scikit-learn row's")
    for note in result.get("notes", ()):
        print(f"note: {note}", file=sys.stderr)
