"""Several Dask workers on one GPU: the tests' way (and the benchmarks') to exercise every
multi-worker path on a machine with a single GPU.

``dask_cuda.LocalCUDACluster`` refuses a device listed twice, so this is a plain
``LocalCluster`` whose nannies start each worker with ``CUDA_VISIBLE_DEVICES`` set to
the one GPU: every worker is a GPU worker of its own process, as on a multi-GPU node,
except that the devices are one.

As a script it starts such a cluster, runs a command with ``--scheduler-address`` of
that cluster appended, and closes the cluster::

    python tests/shared_gpu.py 2 -- python -m mgpu_dask.run logreg --quiet
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from typing import Iterator


@contextlib.contextmanager
def shared_gpu_cluster(n_workers: int, gpu: str = "0") -> Iterator[str]:
    """``n_workers`` worker processes, each seeing only GPU ``gpu``; yields the scheduler's
    address (on localhost)."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                      host="127.0.0.1", dashboard_address=None,
                      env={"CUDA_VISIBLE_DEVICES": gpu}) as cluster:
        cluster.wait_for_workers(n_workers, timeout=120)
        yield cluster.scheduler_address


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit() or int(argv[0]) < 1:
        print("usage: shared_gpu.py N_WORKERS -- COMMAND ...", file=sys.stderr)
        return 2
    with shared_gpu_cluster(int(argv[0])) as address:
        return subprocess.call([*argv[2:], "--scheduler-address", address])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
