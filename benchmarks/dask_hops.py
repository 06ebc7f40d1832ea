"""Where a warm predict's and fit's time goes, hop by hop: the client's own work, call to
first task start, the tasks (Dask's task stream), last task end to the client's return.

usage (GPU machine): python benchmarks/dask_hops.py OUT.json [--scheduler-address ADDR]
(with ``python tests/shared_gpu.py N --`` in front for N workers sharing GPU 0).
Clocks: task times are the worker's, the rest the client's (one machine).
"""
import json, statistics, sys, time

def med(xs): return round(1e3 * statistics.median(xs), 3) if xs else None

def main():
    from distributed import get_task_stream
    from mgpu_dask.cluster import connect
    from mgpu_dask.data import load_dataset, split, shard
    from mgpu_dask.data.sharding import pixel_rows
    from mgpu_dask.knn import KNeighborsClassifier
    from mgpu_dask.logreg import LogisticRegression
    from mgpu_dask.parallel import placement, inputs
    out_path = sys.argv[1]
    address = sys.argv[sys.argv.index("--scheduler-address") + 1] if "--scheduler-address" in sys.argv else None
    ds = load_dataset("mnist"); s = split(ds.X, ds.y, seed=0)
    marks = {}
    real_persist = placement.persist
    def persist(client, array):
        a = time.time(); r = real_persist(client, array); marks.setdefault("persist", []).append((a, time.time())); return r
    placement.persist = persist
    import mgpu_dask.knn.plans as plans_mod
    plans_mod.placement.persist = persist
    real_to_host = inputs.to_host
    res = {}
    kw = dict(scheduler_address=address) if address else dict(workers=1)
    with connect(dashboard_address=":0", **kw) as running:
        client = running.client
        q = shard(s.X_test, client, timeout=60)
        clf = KNeighborsClassifier(3).fit(s.X_train, s.y_train)
        Xtr, Xte, scale = pixel_rows(s.X_train, s.X_test, client, 1 / 255.0, keep_bytes=True, timeout=60)
        ytr = shard(s.y_train, client, like=Xtr, timeout=60)
        for i in range(5):
            real_to_host(clf.predict(q, on_host=True))
            m = LogisticRegression(input_scale=scale).fit(Xtr, ytr); real_to_host(m.predict(Xte, on_host=True))
        def run(label, fn, n=20):
            rows = []
            with get_task_stream(client) as ts:
                for i in range(n):
                    marks.clear(); a = time.time(); fn(); b = time.time()
                    rows.append((a, b, list(marks.get("persist", []))))
            tasks = sorted(((ss["start"], ss["stop"], str(d["key"])) for d in ts.data for ss in d["startstops"] if ss["action"] == "compute"))
            walls, before, build, send, taskt, after = [], [], [], [], [], []
            for a, b, ps in rows:
                mine = [t for t in tasks if a <= t[0] <= b]
                walls.append(b - a)
                if not mine: continue
                first = min(t[0] for t in mine); last = max(t[1] for t in mine)
                before.append(first - a); taskt.append(last - first); after.append(b - last)
                if ps:
                    build.append(ps[0][0] - a); send.append(ps[-1][1] - ps[0][0])
            res[label] = {"wall": med(walls), "call_to_first_task_start": med(before),
                          "tasks_span": med(taskt), "last_task_end_to_return": med(after),
                          "client_build_before_persist": med(build), "client_persist_calls": med(send),
                          "tasks": len(tasks)}
            print(label, res[label], flush=True)
        run("knn_predict", lambda: real_to_host(clf.predict(q, on_host=True)))
        holder = {}
        def lr_fit():
            holder["m"] = LogisticRegression(input_scale=scale).fit(Xtr, ytr)
        run("lr_fit", lr_fit)
        run("lr_predict", lambda: real_to_host(holder["m"].predict(Xte, on_host=True)))
        def noop(): return 0
        run("submit_result", lambda: client.submit(noop, pure=False).result(), n=40)
    json.dump(res, open(out_path, "w"), indent=1)

if __name__ == "__main__":
    main()
