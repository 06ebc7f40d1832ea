"""What a first run compiles, kernel by kernel, and what each costs on this machine.

Runs the default ``knn`` and ``logreg`` warm-ups (``mgpu_dask.knn.warmup``,
``mgpu_dask.logreg.warmup``) in this one process with empty kernel caches, timing
every Numba kernel compile and every CuPy NVRTC compile, then the same warm-ups again
in a second process on the now filled caches (loading only).  Prints JSON (and writes
it to the path given as the first argument, if any).  Needs a GPU.

    python benchmarks/compile_costs.py [out.json]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

LOAD_ONLY = "--load-only"


def _timing_wrappers(log: list[dict]) -> None:
    from cupy.cuda import compiler
    from numba.cuda import dispatcher

    from mgpu_dask.kernels.compiled import _kernel_names

    compile_kernel = dispatcher.CUDADispatcher.compile

    def timed_compile(self, sig):
        started, misses = time.perf_counter(), sum(self._cache_misses.values())
        kernel = compile_kernel(self, sig)
        seconds = time.perf_counter() - started
        if seconds > 1e-3:
            log.append({"numba": self.py_func.__qualname__,
                        "module": self.py_func.__module__.rsplit(".", 1)[-1],
                        "seconds": round(seconds, 3),
                        "compiled": sum(self._cache_misses.values()) > misses})
        return kernel

    dispatcher.CUDADispatcher.compile = timed_compile
    nvrtc = compiler._compile_using_nvrtc_no_warning

    def timed_nvrtc(source, *args, **kwargs):
        started = time.perf_counter()
        try:
            return nvrtc(source, *args, **kwargs)
        finally:
            log.append({"cupy": _kernel_names(source),
                        "seconds": round(time.perf_counter() - started, 3)})

    compiler._compile_using_nvrtc_no_warning = timed_nvrtc


def _run() -> dict:
    t0 = time.perf_counter()
    import cupy
    import numba.cuda  # noqa: F401
    imports = time.perf_counter() - t0
    cupy.zeros(1)
    context = time.perf_counter() - t0 - imports
    from mgpu_dask.jobs.warmup import knn_spec, logreg_spec
    from mgpu_dask.knn import warmup as knn_warmup
    from mgpu_dask.logreg import warmup as logreg_warmup

    log: list[dict] = []
    _timing_wrappers(log)
    out = {"imports seconds": round(imports, 3), "first CUDA call seconds": round(context, 3)}
    for task, module, spec in (
            ("knn", knn_warmup, knn_spec(dtype="uint8", dataset=None, precision="auto",
                                         method="gemm", k=3, weights="distance",
                                         plan="replicate", workers=1)),
            ("logreg", logreg_warmup, logreg_spec(dtype="uint8", dataset=None,
                                                  precision="auto", classes=None,
                                                  optimizer="auto"))):
        fields = {k: v for k, v in spec.items() if k != "task"}
        start = len(log)
        got = module.warm_up(gpu=True, **fields)
        out[task] = {"seconds": round(got["seconds"], 3), "steps": got["steps"],
                     "cupy kernels": got.get("cupy kernels"), "each": log[start:]}
    return out


def main(argv: list[str]) -> int:
    if LOAD_ONLY in argv:
        print(json.dumps(_run()))
        return 0
    env = dict(os.environ, NUMBA_CACHE_DIR=tempfile.mkdtemp(prefix="numba."),
               CUPY_CACHE_DIR=tempfile.mkdtemp(prefix="cupy."))
    os.environ.update(env)
    result = {"empty caches": _run()}
    again = subprocess.run([sys.executable, __file__, LOAD_ONLY], env=env,
                           capture_output=True, text=True, check=True)
    result["filled caches"] = json.loads(again.stdout.strip().splitlines()[-1])
    text = json.dumps(result, indent=1)
    print(text)
    if argv:
        with open(argv[0], "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
