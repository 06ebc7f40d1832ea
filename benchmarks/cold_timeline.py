"""Where a cold ``python -m mgpu_dask.run knn`` spends its seconds, on one clock.

Runs the CLI's ``main`` in this fresh process (as ``python -m mgpu_dask.run``
would) with marks on the wall clock, seconds since this process started:
``main`` entered, the fork server's imports done (the time the forked workers
inherited), the cluster start asked for (on its own thread) and returned, each
worker process started, the job's phases, ``main`` returned.  A cProfile of the
client's main thread says what it did meanwhile.  Usage (device machine, repo
root): ``python benchmarks/cold_timeline.py [knn options...] > timeline.log``.
"""

from __future__ import annotations

import cProfile
import io
import json
import os
import pstats
import sys
import time


def since_start() -> float:
    """Seconds since this process started (/proc, 10 ms ticks)."""
    with open("/proc/self/stat") as f:
        start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


ZERO = time.time() - since_start()  # this process's start, wall clock
marks: dict[str, float] = {"interpreter up": time.time() - ZERO}


def mark(name: str) -> None:
    marks[name] = round(time.time() - ZERO, 3)


def _worker_times() -> dict:
    """On a worker: its process start and when its fork server had finished importing."""
    from mgpu_dask import worker_imports

    return {"process start": time.time() - since_start(),
            "server imports done": getattr(worker_imports, "done_at", None),
            "server import seconds": {k: round(v, 3) for k, v in
                                      getattr(worker_imports, "seconds", {}).items()}}


def main() -> int:
    from mgpu_dask import run  # what ``python -m mgpu_dask.run`` imports before main

    mark("mgpu_dask.run imported")
    real_run_task = run.run_task

    def run_task(args):
        mark("run_task entered")
        try:
            return real_run_task(args)
        finally:
            mark("job returned")

    run.run_task = run_task
    from mgpu_dask import cluster

    class Starting(cluster.StartingCluster):
        def __init__(self, **options):
            mark("cluster start asked")
            super().__init__(**options)

        def _start(self):
            super()._start()
            mark("cluster start returned")
            if self.ready is not None:
                rc = self._started.result()
                for address, t in rc.client.run(_worker_times).items():
                    marks[f"worker {address[-5:]} process start"] = round(
                        t["process start"] - ZERO, 3)
                    done = t["server imports done"]
                    if done and done < t["process start"]:  # inherited from the fork server
                        marks["fork server imports done"] = round(done - ZERO, 3)
                        marks["fork server import seconds"] = t["server import seconds"]

    cluster.StartingCluster = Starting
    argv = ["knn", *sys.argv[1:]] if sys.argv[1:2] != ["knn"] else sys.argv[1:]
    profile = cProfile.Profile()
    mark("main entered")
    profile.enable()
    code = run.main(argv)
    profile.disable()
    mark("main returned")
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(30)
    print(json.dumps(marks, indent=1))
    print(out.getvalue())
    return code


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
