"""Shared fixtures: isolated config, a small CPU cluster, tiny IDX data, real MNIST."""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

# Without a GPU, run our Numba CUDA kernels in the CUDA simulator.  This must
# be decided before numba is first imported, hence here, at the very top.
if not os.environ.get("MGPU_DASK_TEST_REAL_CUDA") and shutil.which("nvidia-smi") is None:
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
# One kernel cache for the whole session (the CLI would otherwise point each run's
# workers at the test's own cache folder, and compile everything again each time); tests
# of a first run point their own processes at empty folders.
import tempfile  # noqa: E402

_KERNEL_CACHE = tempfile.mkdtemp(prefix="mgpu-dask-test-kernels-")
os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(_KERNEL_CACHE, "numba"))
os.environ.setdefault("CUPY_CACHE_DIR", os.path.join(_KERNEL_CACHE, "cupy"))

import dask
import numpy as np
import psutil
import pytest

from mgpu_dask.data.idx import write_idx

if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
    from simulator import yield_while_polling

    yield_while_polling()  # the simulated kernels run several times sooner (tests/simulator.py)

REPO = Path(__file__).resolve().parents[1]


def _mnist_dir() -> Path | None:
    candidates = [os.environ.get("MGPU_DASK_TEST_MNIST_DIR"), REPO.parent / "shared/data/mnist",
                  REPO / "shared/data/mnist"]
    for c in candidates:
        if c and (Path(c) / "train-images-idx3-ubyte.gz").is_file():
            return Path(c)
    return None


@pytest.fixture(scope="session")
def mnist_dir() -> Path:
    """The real MNIST files (../shared/data/mnist or $MGPU_DASK_TEST_MNIST_DIR)."""
    found = _mnist_dir()
    if found is None:
        pytest.skip("real MNIST not found (set MGPU_DASK_TEST_MNIST_DIR)")
    return found


@pytest.fixture(autouse=True)
def isolated(tmp_path_factory, monkeypatch):
    """No test reads the user's cache or data dir, and none reaches the internet."""
    cache = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("MGPU_DASK_CACHE_DIR", str(cache))
    monkeypatch.delenv("MGPU_DASK_DATA_DIR", raising=False)
    with dask.config.set({"mgpu-dask.data.mirrors.mnist": [],
                          "mgpu-dask.data.mirrors.fashion-mnist": [],
                          "mgpu-dask.data.download-timeout": "5s"}):
        yield cache


@pytest.fixture(scope="session")
def _session_client():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster, Client(cluster) as c:
        yield c


@pytest.fixture
def client(_session_client):
    """A 2-worker in-process CPU cluster shared by the CPU tests, made the current client.

    Other tests start and close clusters of their own; making this one current
    for each test keeps ``get_client()`` (what the estimators use) pointing at it.
    """
    with _session_client.as_current():
        yield _session_client


@pytest.fixture
def process_client():
    """Three worker processes with nannies: shards really live in other processes,
    and a killed worker is replaced."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=3, threads_per_worker=1, processes=True,
                      dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:
        with client.as_current():
            yield client


def digits_xy() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits as (X, y)."""
    from mgpu_dask.data import load_dataset

    ds = load_dataset("digits")
    return ds.X, ds.y


def shm_segments() -> set[str]:
    """Our shared-memory segments present now (single-host logistic regression)."""
    return {p.name for p in Path("/dev/shm").glob("mgpu_*")}


def exports_held() -> int:
    """Shard exports this process still holds (run it on workers with ``client.run``)."""
    from mgpu_dask.parallel import peer_views

    return len(peer_views._EXPORTS)


def cu_defines(name: str) -> dict[str, float]:
    """The numeric ``#define``s of ``mgpu_dask/kernels/logreg/NAME`` (a ``.cu`` source), for
    tests that check it agrees with the Python side."""
    import re
    from importlib import resources

    text = resources.files("mgpu_dask.kernels.logreg").joinpath(name).read_text()
    return {key: float(value) for key, value in
            re.findall(r"^#define (\w+) (-?[\d.]+)\b", text, flags=re.MULTILINE)}


def exports_kept(client: Any) -> list[int]:
    """Each worker's exports after a single-host fit, fewest first: a leader keeps the
    other holders' exports mapped for the next fit of the same rows
    (``logreg.kept_peers``), so each holder keeps one and the leader none."""
    return sorted(client.run(exports_held).values())


def _held_for_peers() -> tuple[int, int]:
    from mgpu_dask.parallel import peer_views

    return len(peer_views._EXPORTS), peer_views.mapped()


def released_with_the_rows(client: Any, timeout: float = 30.0) -> bool:
    """Whether, once the rows are let go (their dask arrays deleted), every worker soon
    holds no export and maps none."""
    deadline = time.monotonic() + timeout
    while True:
        if set(client.run(_held_for_peers).values()) == {(0, 0)}:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


def make_idx_dir(folder: Path, n_train: int = 60, n_test: int = 20, side: int = 4,
                 seed: int = 0, gz: bool = True) -> Path:
    """Four small, valid IDX files with MNIST's names; returns the folder."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    suffix = ".gz" if gz else ""
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        write_idx(folder / f"{prefix}-images-idx3-ubyte{suffix}",
                  rng.integers(0, 256, (n, side, side), dtype=np.uint8))
        write_idx(folder / f"{prefix}-labels-idx1-ubyte{suffix}",
                  rng.integers(0, 10, n, dtype=np.uint8))
    return folder


@pytest.fixture
def idx_dir(tmp_path) -> Path:
    return make_idx_dir(tmp_path / "idx")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def http_root(tmp_path):
    """Serve a folder on 127.0.0.1; yields (folder, base URL)."""
    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session", autouse=True)
def _device_loop_compiled():
    """On a GPU: the device L-BFGS's kernels compiled once into the session's kernel cache,
    as a machine's first fit leaves them, so that the tests' fits run the loop on the
    device (a fit whose loop is still compiling runs the host's loop on its evaluations
    meanwhile: test_first_fit_meanwhile, in a process of its own with an empty cache)."""
    from mgpu_dask.config.environment import has_gpu

    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or not has_gpu():
        return
    from mgpu_dask.kernels.ahead import Compiling
    from mgpu_dask.logreg.lbfgs.launches import AHEAD_PROCESSES, loop_items

    Compiling(loop_items(), AHEAD_PROCESSES).wait(600)


def pytest_collection_modifyitems(config, items):
    """Skip ``gpu`` tests cleanly where no GPU (or only the simulator) is available."""
    from mgpu_dask.config.environment import has_gpu

    if has_gpu() and os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with CuPy and numba-cuda")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_sessionfinish(session, exitstatus):
    """Leave Numba's CUDA modules to the process's exit.  At interpreter shutdown each
    module's finalizer queues its unload on its context, and once more than a few are
    queued Numba unloads them all; with modules loaded on two GPUs in this process (the
    in-process tests of several GPUs) that unload crashes inside the driver, after
    every test has passed (numba-cuda's ``_PendingDeallocs``; the exit frees them
    anyway).  Disabling each context's pending deallocations here, before any exit
    handler runs, keeps the queue from flushing."""
    if "numba.cuda" not in sys.modules or os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return
    try:
        from numba import cuda

        contexts = [getattr(gpu, "primary_context", None) for gpu in cuda.gpus]
    except Exception:  # no driver here: nothing was loaded
        return
    for context in contexts:
        if context is not None:  # entered, never left: the process ends with it
            _AT_EXIT.enter_context(context.deallocations.disable())


_AT_EXIT = contextlib.ExitStack()


def softmax_reference(logits, labels):
    """Float64 reference for the logistic-regression kernels.

    Returns the residual ``softmax(logits) - onehot(labels)`` and each row's
    cross-entropy.
    """
    z = np.asarray(logits, dtype=np.float64)
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    rows = np.arange(len(labels))
    return p - np.eye(z.shape[1])[labels], -np.log(p[rows, labels])


REPO_ROOT = Path(__file__).resolve().parents[1]


class RunningCommand:
    """``python -m mgpu_dask.run cluster ...`` in a process group of its own (like a terminal)."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mgpu_dask.run", "cluster", "--device", "cpu",
             "--dashboard-address", ":0", *args], cwd=REPO_ROOT, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.lines: dict[str, str] = {}
        deadline = time.time() + 90
        while "join it" not in self.lines:
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"cluster did not start: {self.proc.stderr.read()[-2000:]}")
            key, _, value = line.partition(":")
            self.lines[key.strip()] = value.strip()
            assert time.time() < deadline
        self.children = psutil.Process(self.proc.pid).children(recursive=True)

    def interrupt(self) -> tuple[int, str, str]:
        """Ctrl-C in a terminal: SIGINT to the whole process group."""
        os.killpg(self.proc.pid, signal.SIGINT)
        out, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, out, err


def int8_objectives_agree(monkeypatch, n: int, d: int, k: int, fast: dict, slow: dict):
    """Two int8 ``ShardObjective``s of the same random 8-bit rows, made with
    ``kernels.logreg.int8``'s flags set as ``fast`` and then as ``slow``, give the same
    loss and gradients, bit for bit, at three random points.  Returns both (GPU only)."""
    import cupy

    from mgpu_dask.kernels import logreg as L
    from mgpu_dask.kernels.logreg import int8

    rng = np.random.default_rng(n)
    pixels = cupy.asarray(rng.integers(0, 256, (n, d)).astype(np.uint8))
    y = cupy.asarray(rng.integers(0, k, n).astype(np.int32))
    made = []
    for flags in (fast, slow):
        for name, value in flags.items():
            monkeypatch.setattr(int8, name, value)
        made.append(L.ShardObjective(pixels, y, k, "int8", scale=1 / 255, strict=True))
    for _ in range(3):
        W, b = rng.standard_normal((d, k)) * 0.05, rng.standard_normal(k)
        one, other = made[0](W, b), made[1](W, b)
        assert one[0] == other[0]
        np.testing.assert_array_equal(one[1], other[1])
        np.testing.assert_array_equal(one[2], other[2])
    return made
