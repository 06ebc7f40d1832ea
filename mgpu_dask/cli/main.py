"""``main``: parse, run the command, turn the errors a user can cause into one line and an
exit status; ``cli``: the console entry, which then exits without the interpreter's
teardown."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from typing import Callable, Iterator

from ..exceptions import MgpuDaskError


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so every ``with`` block (cluster, files) unwinds."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated()


@contextlib.contextmanager
def _timeouts(seconds: float | None) -> Iterator[None]:
    """``--timeout`` bounds cluster start and every wait on results."""
    if not seconds:
        yield
        return
    import dask

    with dask.config.set({"mgpu-dask.cluster.start-timeout": f"{seconds}s",
                          "mgpu-dask.cluster.compute-timeout": f"{seconds}s"}):
        yield


def _since_process_start() -> float | None:
    """Seconds since this process started (imports included), where the OS says.

    On Linux from ``/proc`` (10 ms ticks on both sides); psutil's
    ``create_time`` elsewhere, which counts from a boot time rounded to the
    second and so can be up to 1 s off.
    """
    try:
        import os

        with open("/proc/self/stat") as f:  # field 22 (after the parenthesised name): start
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    try:
        import time

        import psutil

        return time.time() - psutil.Process().create_time()
    except Exception:
        return None


def _starts_local_cluster(args: argparse.Namespace) -> bool:
    return (getattr(args, "cluster", None) == "local" and hasattr(args, "device")
            and not getattr(args, "scheduler_address", None)
            and not getattr(args, "scheduler_file", None))


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    startup = _since_process_start()
    from .parser import build_parser

    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "workflow":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.cluster_argv = extra
    args.startup_seconds = startup
    args.process_started = None if startup is None else time.time() - startup
    args.command_line = "python -m mgpu_dask.run " + " ".join(
        sys.argv[1:] if argv is None else argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    if args.command in ("knn", "logreg", "bench", "workflow", "cluster"):
        from ..jobs.warmup import use_kernel_caches

        use_kernel_caches()  # before any worker starts: they inherit the environment
    if _starts_local_cluster(args):  # before the heavy imports, so the two overlap
        from ..cluster.worker_start import start_early

        start_early(args.device)
        if args.command in ("knn", "logreg") and getattr(args, "backend", "numba") == "numba":
            from ..jobs.options import compile_ahead  # the first run's compiles, side by side

            args.compiling = compile_ahead(args)
    if args.command != "info" and not (args.command in ("knn", "logreg")
                                       and getattr(args, "backend", None) == "numba"):
        # every other command reads data sets into dask arrays; a knn or logreg run
        # (jobs.options.run_task) imports them once it has asked for its cluster
        from ..config.environment import import_dask_array

        import_dask_array()  # this process never uses xarray (see UNUSED_BY_DASK_ARRAY)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        with _timeouts(getattr(args, "timeout", None)):
            return handler(args)
    except MgpuDaskError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except TimeoutError as exc:
        print(f"error: a wait timed out ({exc}); the cluster was shut down. Raise --timeout, or "
              "watch the dashboard for a stuck or dead worker", file=sys.stderr)
        return 3
    except Terminated:
        print("terminated (SIGTERM): cluster shut down, no partial result files", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("interrupted: cluster shut down, no partial result files", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)


def cli() -> None:
    """``python -m mgpu_dask.run`` and the ``mgpu-dask`` command: :func:`main`, then the exit
    without the interpreter's teardown.

    When ``main`` returns, the cluster is closed and every file is written;
    Python's exit handlers (``atexit``: logging, multiprocessing, Dask) run
    here, and only the interpreter's finalisation of every module and object
    is skipped (most of a second of a cold run, needed by nothing of ours).
    """
    code = main()
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    cli()
