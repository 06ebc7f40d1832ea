"""Where a warm KNN predict's time goes across the workers: every task and transfer of
the last REPEATS fused predicts (Dask's task stream), and on each worker the search
calls themselves (``kernels.knn.local_candidates``, timed to the end of their GPU
work) and the merges and votes, all on one clock (one host).  A predict asked of the
workers straight (``parallel.direct.run_held``) is timed stage by stage too: on the
client the call, the connection check and each worker's answer; on each worker Dask's
``run`` handler, the lane's call (``direct.served``), the calls in its task thread and
the vote to host predictions; on both
ends of a lane (``parallel.lane``) each send and the moment each message is in hand.

usage (GPU machine): python benchmarks/knn_timeline.py OUT.json [knn job options as
keywords, e.g. dataset=mnist-deformed copies=155 workers=2 fraction=4 repeats=3]
[--scheduler-address ADDRESS]; workers sharing one GPU:
python tests/shared_gpu.py 4 -- python benchmarks/knn_timeline.py OUT.json repeats=7

Each predict's events are given in ms from the client's call; ``summary`` gives per
predict the wall, the span of the searches on each worker, and what lies outside them.
"""
import json
import sys
import time

TIMED = {"mgpu_dask.kernels.knn": ("local_candidates", "merge", "vote")}


def _install() -> None:
    """On a worker: wrap the search, merge and vote functions to record their spans."""
    import importlib

    import mgpu_dask.knn.plans as plans
    events = []
    plans._TIMELINE = events

    def wrap(name, fn):
        def timed(*args, **kwargs):
            start = time.time()
            out = fn(*args, **kwargs)
            try:
                import cupy
                cupy.cuda.get_current_stream().synchronize()
            except Exception:
                pass
            events.append((name, start, time.time(), getattr(args[0], "shape", None)))
            return out
        return timed

    for module, names in TIMED.items():
        mod = importlib.import_module(module)
        for name in names:
            setattr(mod, name, wrap(name, getattr(mod, name)))
    import mgpu_dask.knn.blocks as blocks
    import mgpu_dask.knn.joined as joined
    import mgpu_dask.parallel.direct as direct
    for mod, name, label in ((direct, "_answer_held", "thread calls"),
                             (direct, "served", "lane call"),
                             (joined, "joined_queries", "joined queries"),
                             (blocks, "vote_pred", "vote to predictions")):
        setattr(mod, name, stamped(events, label, getattr(mod, name)))
    direct.held_calls = stamped_async(events, "held_calls on the loop", direct.held_calls)
    _stamp_lane(events, "worker lane")


def _stamp_lane(events: list, who: str) -> None:
    """The lane's sends (their spans) and reads (the moment each message was in hand: a
    read's span would be its wait for the message)."""
    import mgpu_dask.parallel.lane as lane
    lane._send = stamped(events, f"{who} send", lane._send)
    real = lane._message

    def read(sock):
        out = real(sock)
        now = time.time()
        events.append((f"{who} message in hand", now, now, None))
        return out
    lane._message = read


def stamped(events: list, label: str, fn):
    """``fn`` recording its span (no synchronisation: it returns when its work is done)."""
    def timed(*args, **kwargs):
        start = time.time()
        out = fn(*args, **kwargs)
        events.append((label, start, time.time(), None))
        return out
    return timed


def stamped_async(events: list, label: str, fn):
    async def timed(*args, **kwargs):
        start = time.time()
        out = await fn(*args, **kwargs)
        events.append((label, start, time.time(), None))
        return out
    return timed


def _install_handler(dask_worker=None) -> None:
    """On a worker: time Dask's ``run`` handler (what a straight call reaches)."""
    import mgpu_dask.knn.plans as plans
    run = dask_worker.handlers["run"]

    async def timed(comm=None, **msg):  # Dask hands ``comm`` to handlers that name it
        start = time.time()
        out = await run(comm=comm, **msg)
        plans._TIMELINE.append(("run handler", start, time.time(), None))
        return out

    dask_worker.handlers["run"] = timed


def _collect() -> list:
    import mgpu_dask.knn.plans as plans
    return [(n, a, b, list(s) if s else None) for n, a, b, s in getattr(plans, "_TIMELINE", [])]


def main() -> None:
    from distributed import get_client

    import mgpu_dask.jobs.knn as job
    out_path = sys.argv[1]
    options, args, address = {}, sys.argv[2:], None
    if "--scheduler-address" in args:  # tests/shared_gpu.py appends it
        i = args.index("--scheduler-address")
        address, args = args[i + 1], args[:i] + args[i + 2:]
    for arg in args:
        key, value = arg.split("=", 1)
        options[key] = value if not value.replace(".", "").isdigit() else (
            float(value) if "." in value else int(value))
    workers = options.pop("workers", 1)
    repeats = options.setdefault("repeats", 3)
    calls = []
    real_predict = job.KNeighborsClassifier.predict
    state = {}

    def predict(self, X, **kwargs):
        client = get_client()
        if "installed" not in state:
            client.run(_install)
            client.run(_install_handler)
            client.get_task_stream(start=time.time())  # the scheduler records from here
            state["installed"] = True
        start = time.time()
        out = job.to_host(real_predict(self, X, **kwargs))
        calls.append((start, time.time()))
        return out

    real_searched = job.searched

    def searched(client, s, clf):
        state["stream"] = client.get_task_stream(start=calls[0][0] - 1) if calls else []
        state["workers"] = client.run(_collect)
        return real_searched(client, s, clf)

    import mgpu_dask.parallel.direct as direct
    import mgpu_dask.parallel.results as results
    here: list = []  # the client's stages, on the same clock
    import mgpu_dask.knn.straight as straight
    direct.run_held = stamped(here, "client run_held", direct.run_held)
    straight._one_search_per_gpu = stamped(here, "client one search per GPU",
                                           straight._one_search_per_gpu)
    _stamp_lane(here, "client lane")
    results.reachable = stamped_async(here, "client reachable", results.reachable)
    direct._run = stamped_async(here, "client one worker's answer", direct._run)
    job.to_host = stamped(here, "client to_host", job.to_host)
    job.KNeighborsClassifier.predict = predict
    job.searched = searched
    cluster = {"scheduler_address": address} if address else {"workers": workers}
    result = job.knn_job(cluster_options=cluster, **options)
    predicts = calls[-repeats:]
    out = {"options": {**options, "workers": result.get("workers", workers),
                       "scheduler_address": address}, "accuracy": result["accuracy"],
           "warm_predict_median_ms": 1e3 * result["warm_predict_median"],
           "machine": result.get("machine"), "predicts": [], "summary": []}
    for a, b in predicts:
        events = []
        for task in state.get("stream", []):
            for ss in task["startstops"]:
                if a <= ss["start"] <= b:
                    events.append({"what": f"{ss['action']} {task['key']}",
                                   "worker": task.get("worker"),
                                   "start_ms": round(1e3 * (ss["start"] - a), 2),
                                   "stop_ms": round(1e3 * (ss["stop"] - a), 2)})
        spans = {}
        for name, start, stop, _ in here:
            if a <= start <= b:
                events.append({"what": name, "worker": "client",
                               "start_ms": round(1e3 * (start - a), 2),
                               "stop_ms": round(1e3 * (stop - a), 2)})
        for worker, recorded in state.get("workers", {}).items():
            for name, start, stop, shape in recorded:
                if a <= start <= b:
                    events.append({"what": f"{name} {shape}", "worker": worker,
                                   "start_ms": round(1e3 * (start - a), 2),
                                   "stop_ms": round(1e3 * (stop - a), 2)})
                    if name == "local_candidates":
                        lo, hi, total = spans.get(worker, (stop, start, 0.0))
                        spans[worker] = (min(lo, start), max(hi, stop), total + stop - start)
        events.sort(key=lambda e: e["start_ms"])
        out["predicts"].append({"wall_ms": round(1e3 * (b - a), 2), "events": events})
        out["summary"].append({
            "wall_ms": round(1e3 * (b - a), 2),
            "searches": {w: {"first_start_ms": round(1e3 * (lo - a), 2),
                             "last_stop_ms": round(1e3 * (hi - a), 2),
                             "busy_ms": round(1e3 * total, 2)}
                         for w, (lo, hi, total) in spans.items()}})
    json.dump(out, open(out_path, "w"), indent=1)
    for s in out["summary"]:
        print(json.dumps(s))


if __name__ == "__main__":
    main()
