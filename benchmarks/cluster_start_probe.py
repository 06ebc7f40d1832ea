"""What ``cluster.connect`` spends its time on once the CLI's modules are imported (device
machine).  The client's threads are sampled every millisecond (the scheduler starts on
Dask's event-loop thread, which a profiler of the main thread does not see): each
function's share of the samples in which it was on a thread's stack, waits included.
Then the same start again in the same process (its imports done).  Usage: python benchmarks/cluster_start_probe.py [--workers W]
"""

from __future__ import annotations

import argparse
import collections
import sys
import threading
import time

import mgpu_dask.jobs  # noqa: F401  (everything the CLI has imported by then)
from cold_timeline import since_start  # this folder: the scripts run as files
from mgpu_dask import worker_start
from mgpu_dask.cluster import connect


def _started() -> float:
    """This process's start on the wall clock (run on the workers)."""
    return time.time() - since_start()


IDLE = ("(select)", "(wait)", "(sleep)", "(acquire)", "(_run_once)", "(poll)", "(get)",
        "(run_forever)", "(_watch)", "(join)", "(_wait_for_tstate_lock)", "(recv)", "(_recv)",
        "(read)", "(accept)")


class Sampler:
    """About every ``period`` s, the stacks of every other thread: how often each function is
    on one (each sample counts for the wall time over the number of samples)."""

    def __init__(self, period: float = 1e-3) -> None:
        self.period, self.samples, self.per_sample = period, 0, period
        self.on_stack: collections.Counter = collections.Counter()
        self.busy: collections.Counter = collections.Counter()  # on a stack, not waiting
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = threading.get_ident()
        began = time.perf_counter()
        while not self._stop.is_set():
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                seen, names = set(), []
                while frame is not None:
                    code = frame.f_code
                    names.append(f"{code.co_filename.split('site-packages/')[-1].split('gpu-site/')[-1]}"
                                 f":{code.co_firstlineno}({code.co_name})")
                    frame = frame.f_back
                seen.update(names)
                self.on_stack.update(seen)
                if names and not any(w in names[0] for w in IDLE):
                    self.busy.update(n for n in seen if "importlib" not in n)
            self.samples += 1
            time.sleep(self.period)
        self.per_sample = (time.perf_counter() - began) / max(1, self.samples)

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def report(self, top: int = 45) -> str:
        busy = "\n".join(f"{count * self.per_sample:7.3f} s  {name}"
                         for name, count in self.busy.most_common(40))
        return ("busy (a thread running, not waiting, with this function on its stack):\n" + busy
                + "\non a stack (waits included):\n"
                + "\n".join(f"{count * self.per_sample:7.3f} s  {name}"
                            for name, count in self.on_stack.most_common(top)))


def start(workers: int, dashboard: str | None, sample: bool) -> None:
    sampler = Sampler() if sample else None
    began = time.time()
    with (sampler or _nothing()):
        with connect(workers=workers, dashboard_address=dashboard) as rc:
            ready = time.time() - began
            starts = sorted(t - began for t in rc.client.run(_started).values())
    print(f"dashboard {dashboard!r}: cluster ready {ready:.3f} s after connect(); worker "
          f"processes began at {[round(s, 3) for s in starts]} s", flush=True)
    if sampler:
        print(sampler.report(), flush=True)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    worker_start.start_server()
    from multiprocessing import forkserver

    forkserver.ensure_running()
    time.sleep(6)  # the fork server's imports are not what is measured here
    start(args.workers, ":0", sample=True)
    start(args.workers, ":0", sample=False)


if __name__ == "__main__":
    main()
