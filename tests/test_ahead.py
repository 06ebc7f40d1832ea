"""Compiling a first run's kernels ahead, side by side (mgpu_dask.kernels.ahead, jobs.ahead)."""

import importlib
import inspect
import json
import os
import types

import pytest

from mgpu_dask.jobs import ahead
from mgpu_dask.kernels import ahead as kernels_ahead


def test_signatures_round_trip_through_text():
    from numba.core import types

    sig = (types.Array(types.float32, 2, "C"), types.Array(types.int8, 1, "A"), types.int64,
           types.float64, types.boolean, types.Array(types.uint32, 3, "F"))
    text = kernels_ahead.encode(sig)
    assert text[0] == "array(float32, 2d, C)" and text[4] == "bool"
    assert kernels_ahead.decode(text) == sig


def test_a_type_that_is_not_numbas_is_refused():
    with pytest.raises(ValueError, match="not a Numba scalar type"):
        kernels_ahead.decode(["array(float32, 2d, C)", "Dispatcher"])


def test_balance_spreads_by_seconds_and_keeps_a_kernels_signatures_together():
    items = [{"numba": "m:a", "signature": ["int64"], "seconds": 2.0},
             {"numba": "m:a", "signature": ["float64"], "seconds": 0.5},
             {"numba": "m:b", "signature": ["int64"], "seconds": 2.0},
             {"cupy": {"source": "x"}, "seconds": 1.0},
             {"cupy": {"source": "y"}, "seconds": 1.0},
             {"numba": "m:c", "signature": ["int64"], "seconds": 0.2}]
    groups = kernels_ahead.balance(items, 3)
    assert sorted(i for g in groups for i in g) == list(range(len(items)))
    assert len(groups) == 3
    assert any({0, 1} <= set(g) for g in groups)          # m:a's two signatures: one group
    loads = [sum(items[i]["seconds"] for i in g) for g in groups]
    assert max(loads) <= 2.7                               # 6.7 s over three: none alone
    assert [sorted(g) for g in kernels_ahead.balance(items, 1)] == [list(range(len(items)))]


def test_a_runs_kind_ignores_field_order_and_the_device():
    one = {"task": "knn", "k": 3, "dtype": "uint8"}
    assert ahead.key(one) == ahead.key({"dtype": "uint8", "gpu": True, "k": 3, "task": "knn"})
    assert ahead.key(one) != ahead.key({**one, "k": 4})


def test_cupy_kernels_are_compiled_ahead_only_for_the_cupy_that_recorded_them(tmp_path,
                                                                              monkeypatch):
    spec = {"task": "knn", "k": 3}
    listed = {"cupy": "14.2.0", "runs": {ahead.key(spec): [
        {"numba": "m:a", "signature": ["int64"]}, {"cupy": {"source": "s"}}]}}
    path = tmp_path / "ahead.json"
    path.write_text(json.dumps(listed))
    monkeypatch.setattr(ahead, "LIST", path)
    assert len(ahead.items_for(spec, "14.2.0")) == 2
    assert [i.get("numba") for i in ahead.items_for(spec, "13.6.0")] == ["m:a"]
    assert ahead.items_for({**spec, "k": 5}, "14.2.0") == []


def test_a_run_whose_caches_hold_its_kernels_starts_no_compiling(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba"))
    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path / "cupy"))
    spec = {"task": "logreg", "n_classes": 10}
    monkeypatch.setattr(ahead, "items_for", lambda spec, version: [{"numba": "m:a"}])
    started = []
    monkeypatch.setattr(kernels_ahead, "Compiling",
                        lambda items, processes, on_first_compile: started.append(items) or "c")
    assert ahead.start(spec, print) == "c" and started == [[{"numba": "m:a"}]]
    ahead.mark_ready(spec)
    assert ahead.start(spec, print) is None and len(started) == 1
    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path / "other"))  # other caches: not known
    assert ahead.start(spec, print) == "c"


def test_compiling_processes_that_cannot_start_their_work_end_and_say_so():
    """Where the children cannot compile (here: a module that does not exist), ``wait``
    returns with every item failed or not reached, and no line says a compile began."""
    said = []
    items = [{"numba": "mgpu_dask.no_such_module:kernel", "signature": ["int64"]}]
    done = kernels_ahead.Compiling(items, 2, on_first_compile=lambda: said.append(1)).wait(60)
    assert done["compiled"] == 0 and done["processes"] == 1
    assert len(done["failed"]) + done["not reached"] == 1
    assert said == []
    assert done["by process"] == [{"imports done after": done["by process"][0]["imports done after"],
                                   "kernels": [["mgpu_dask.no_such_module:kernel", None]]}]


def test_listed_kernels_are_named_in_the_report():
    assert kernels_ahead.label({"numba": "mgpu_dask.kernels.knn.cuda:scan_tile"}) == \
        "knn.cuda:scan_tile"
    source = 'extern "C" __global__ void mgpu_pixel_sq_norms(const unsigned char* x) {}'
    assert kernels_ahead.label({"cupy": {"source": source}}) == "cupy:mgpu_pixel_sq_norms"


def test_the_listed_kernels_exist_and_their_signatures_read_back():
    """ahead.json names kernels of ours that exist, by signatures Numba reads back with one
    type per parameter, for the kinds of run the command line makes by default."""
    listed = json.loads(ahead.LIST.read_text())
    assert set(listed["runs"]) == {ahead.key(s) for s in ahead.usual_specs()}
    for items in listed["runs"].values():
        assert any("numba" in i for i in items) and any("cupy" in i for i in items)
        for item in items:
            if "numba" in item:
                module, name = item["numba"].split(":")
                assert module.startswith("mgpu_dask.kernels.")
                kernel = getattr(importlib.import_module(module), name, None)
                assert kernel is not None, item["numba"]
                kernels_ahead.decode(item["signature"])
                # one type per parameter (the simulator's kernels keep the function as ``fn``)
                fn = getattr(kernel, "py_func", None) or kernel.fn
                assert len(item["signature"]) == len(inspect.signature(fn).parameters), item
            else:
                assert item["cupy"]["source"] and isinstance(item["cupy"]["options"], list)


@pytest.mark.parametrize("package, file", [("mgpu_dask.kernels.knn", "fused.cu"),
                                           ("mgpu_dask.kernels.logreg", "fused.cu"),
                                           ("mgpu_dask.kernels.logreg", "onepass.cu")])
def test_listed_sources_of_our_kernel_files_are_the_files_as_they_are(package, file):
    """A CuPy kernel of ours that lives in a .cu file of the package is listed with the
    source its loader gives NVRTC (the shared helpers, then the file) and that loader's
    options: an edit of either file without recording the list again would compile,
    ahead, a kernel no run asks for."""
    from importlib import resources

    from mgpu_dask.kernels.cuda_source import source
    from mgpu_dask.kernels.knn import fused as knn_fused
    from mgpu_dask.kernels.logreg import fused as logreg_fused
    from mgpu_dask.kernels.logreg import onepass

    variants = {
        ("mgpu_dask.kernels.knn", "fused.cu"): [
            b.options() for b in (knn_fused.MMA_SYNC, knn_fused.WGMMA_STREAMED,
                                  knn_fused.WGMMA_RESIDENT, knn_fused.WGMMA_TMA)],
        ("mgpu_dask.kernels.logreg", "fused.cu"): [logreg_fused.options(10, 48)],
        ("mgpu_dask.kernels.logreg", "onepass.cu"): [onepass.options(10, 48, 784, (9, 0))],
    }[package, file]
    text = source(package, file)
    marker = resources.files(package).joinpath(file).read_text().splitlines()[0]
    listed = [i["cupy"] for items in json.loads(ahead.LIST.read_text())["runs"].values()
              for i in items if "cupy" in i and marker in i["cupy"]["source"]]
    assert listed, f"{package}'s {file} is not in ahead.json"
    for item in listed:
        assert item["source"] == text
        assert any(all(option in item["options"] for option in options) for options in variants)


def test_a_kernel_built_for_one_architecture_is_compiled_ahead_only_for_it():
    """The list is recorded on one GPU; Hopper's wgmma build (``-arch=sm_90a``) is of no
    use to another GPU, and options naming no architecture suit every GPU."""
    assert not kernels_ahead.for_another_gpu(["--std=c++17", "-arch=sm_90a"], "90")
    assert kernels_ahead.for_another_gpu(["--std=c++17", "-arch=sm_90a"], "80")
    assert kernels_ahead.for_another_gpu(["-arch=sm_90a"], "100")
    assert not kernels_ahead.for_another_gpu(["--std=c++17", "-DBN=128"], "80")


@pytest.mark.gpu
def test_on_a_gpu_compiling_ahead_leaves_nothing_for_the_warm_up(tmp_path):
    """With empty caches, the listed kernels compiled ahead (in child processes) leave the
    default knn and logreg warm-ups nothing to compile, Numba's or CuPy's."""
    import subprocess
    import sys

    pytest.importorskip("cupy")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"),
               CUPY_CACHE_DIR=str(tmp_path / "cupy"))
    script = """
import json, os, sys
from mgpu_dask.jobs import ahead
from mgpu_dask.jobs.warmup import WORKER_MODULES
import importlib
out = {}
for spec in ahead.usual_specs():
    done = None
    items = ahead.items_for(spec, ahead._cupy_version())
    if items:
        from mgpu_dask.kernels.ahead import Compiling
        done = Compiling(items, 4).wait(600)
    out[ahead.key(spec)] = done
for spec in ahead.usual_specs():
    module = importlib.import_module(WORKER_MODULES[spec["task"]])
    got = module.warm_up(gpu=True, **{k: v for k, v in spec.items() if k != "task"})
    out[ahead.key(spec) + " warm-up"] = got["compiled"]
print(json.dumps(out))
"""
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    for spec in ahead.usual_specs():
        done = out[ahead.key(spec)]
        assert done is not None and not done["failed"] and not done["not reached"], done
        assert out[ahead.key(spec) + " warm-up"] == 0, (spec, out)


def _args(*argv):
    from mgpu_dask.cli.parser import build_parser

    return build_parser().parse_args(list(argv))


def test_the_cli_starts_compiling_only_for_a_local_gpu_run_of_a_listed_kind(monkeypatch):
    from mgpu_dask.jobs import options

    started = []
    monkeypatch.setattr(ahead, "start", lambda spec, say: started.append(spec) or "compiling")
    assert options.compile_ahead(_args("knn", "--device", "cpu")) is None
    assert options.compile_ahead(_args("knn", "--scheduler-address", "tcp://h:8786")) is None
    monkeypatch.setattr(options, "_local_gpu", lambda args: True)
    assert options.compile_ahead(_args("logreg", "--classes", "3,x")) is None  # run_task says
    assert started == []
    assert options.compile_ahead(_args("knn", "--k", "5")) == "compiling"
    assert started[0]["task"] == "knn" and started[0]["k"] == 5


def test_compiling_processes_stop_when_the_run_ends_without_waiting():
    """A run refused after its compiling began (a bad option) leaves no process behind."""
    items = [{"numba": "mgpu_dask.no_such_module:kernel", "signature": ["int64"]}]
    compiling = kernels_ahead.Compiling(items, 1)
    child = compiling._children[0]
    compiling._stop()
    assert child.wait(30) is not None


def test_each_item_is_reported_compiled_or_loaded(monkeypatch):
    """``compile_items`` says of each kernel whether it compiled (a cache miss) or loaded."""
    import sys
    import types as pytypes

    class Dispatcher:  # as Numba's: a compile that misses the cache counts in _cache_misses
        def __init__(self, cached):
            self.cached, self._cache_misses = cached, {}

        def compile(self, sig):
            if not self.cached:
                self._cache_misses[sig] = 1

    module = pytypes.ModuleType("mgpu_dask.kernels.fake_for_test")
    module.new, module.old = Dispatcher(False), Dispatcher(True)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    got = []
    kernels_ahead.compile_items(
        [{"numba": f"{module.__name__}:{name}", "signature": ["int64"]} for name in ("new", "old")],
        got.append)
    assert [(g["item"], g["compiled"]) for g in got] == [(0, True), (1, False)]


def test_a_list_of_numba_kernels_alone_leaves_cupy_unloaded(monkeypatch):
    """A compiling process given only Numba kernels does not import CuPy (a few tenths of
    a second before its first kernel); one with a CuPy kernel tracks CuPy's compiles."""
    import sys
    import types as pytypes

    class Dispatcher:
        _cache_misses: dict = {}

        def compile(self, sig):
            pass

    module = pytypes.ModuleType("mgpu_dask.kernels.fake_numba_only")
    module.kernel = Dispatcher()
    monkeypatch.setitem(sys.modules, module.__name__, module)
    tracked = []
    monkeypatch.setattr(kernels_ahead, "track_cupy", lambda: tracked.append(1))
    numba_item = {"numba": f"{module.__name__}:kernel", "signature": ["int64"]}
    got = []
    kernels_ahead.compile_items([numba_item], got.append)
    assert tracked == [] and got[0]["item"] == 0 and "error" not in got[0]
    monkeypatch.setattr(kernels_ahead, "_compile_one", lambda item: None)
    kernels_ahead.compile_items([numba_item, {"cupy": {"source": ""}}], got.append)
    assert tracked == [1]


def _warmed_up() -> dict:
    import time

    return {"compiled": 0, "seconds": 0.01, "ended": time.time()}


def test_the_warm_up_phase_ends_when_the_workers_finished_not_when_the_client_looked(client):
    """A client still importing when the workers' warm-up ends does not lengthen the phase."""
    import time

    from mgpu_dask.jobs.phases import Phases
    from mgpu_dask.jobs.warmup import WarmUp, finish

    began = (time.perf_counter(), time.time())
    futures = [client.submit(_warmed_up, pure=False)]
    futures[0].result()
    time.sleep(1.0)  # the client comes late
    phases = Phases(None)
    finish(WarmUp(futures, began, cached=True), phases, timeout=30)
    assert 0.0 <= phases.seconds["warm-up"] < 0.8
    (start, end), = phases.windows["warm-up"]
    assert start == began[1] and end - start == pytest.approx(phases.seconds["warm-up"])


def test_only_deformed_mnist_warms_up_the_large_shards_evaluation():
    """Deformed MNIST's logreg spec says its shards may be large (the warm-up then takes the
    one-pass evaluation too, and the list has that kind of run apart); MNIST's spec, as the
    list keys it, does not change."""
    from mgpu_dask.jobs.warmup import logreg_spec

    common = dict(dtype="uint8", precision="auto", classes=None, optimizer="auto")
    deformed = logreg_spec(dataset="mnist-deformed", **common)
    mnist = logreg_spec(dataset="mnist", **common)
    assert deformed.pop("large_shards") is True and deformed == mnist
    assert "large_shards" not in logreg_spec(dataset=None, **common)
    assert ahead.key({**mnist, "large_shards": True}) in {ahead.key(s) for s in ahead.usual_specs()}


def test_the_device_loops_kernels_compiled_ahead_are_the_ones_its_fits_compile():
    """A first device fit has side processes compile the L-BFGS loop's kernels
    (``launches.compile_ahead``): typed from stand-ins of the loop's buffers, they are
    the very kernels and signatures a logistic-regression run on a GPU compiled when
    ``ahead.json`` was recorded, every one of them."""
    from mgpu_dask.logreg.lbfgs import launches

    items = launches.loop_items()
    listed = json.loads(ahead.LIST.read_text())
    recorded = {(i["numba"], tuple(i["signature"])) for items_ in listed["runs"].values()
                for i in items_ if "numba" in i and ".lbfgs." in i["numba"]}
    assert {(i["numba"], tuple(i["signature"])) for i in items} == recorded
    assert len(items) == 8


def test_the_loops_longest_kernels_compile_each_in_a_process_of_its_own():
    """The side processes of a first device fit are shared by each kernel's compile time:
    the three kernels ``ahead.json`` recorded as the longest get a process each, so that
    the longest alone, not two in a row, sets when the fit may go on."""
    from mgpu_dask.logreg.lbfgs import launches

    items = launches.loop_items()
    listed = json.loads(ahead.LIST.read_text())
    recorded = {i["numba"]: i["seconds"] for items_ in listed["runs"].values()
                for i in items_ if "numba" in i and ".lbfgs." in i["numba"]}
    longest = sorted(recorded, key=recorded.get)[-3:]
    groups = kernels_ahead.balance(items, launches.AHEAD_PROCESSES)
    assert sorted(i for g in groups for i in g) == list(range(len(items)))
    for name in longest:
        group = next(g for g in groups if any(items[i]["numba"] == name for i in g))
        assert [items[i]["numba"] for i in group] == [name]


def test_a_fit_waits_for_the_loops_kernels_compiled_ahead(monkeypatch):
    """The launches of a device L-BFGS wait for kernels being compiled ahead (then load
    them), once; without a GPU nothing is started."""
    from mgpu_dask.logreg.lbfgs import launches

    waited = []

    class Started:
        def wait(self, timeout):
            waited.append(timeout)
            return {}

    monkeypatch.setattr(launches, "_AHEAD", [Started()])
    b = types.SimpleNamespace(**{name: None for name in (
        "x", "g", "gt", "p", "pg", "rho", "scal", "S", "Y", "SY", "YY", "psums", "dparts",
        "pparts", "gparts", "fparts", "params", "parts", "count", "stream")})
    monkeypatch.setattr(launches, "Launcher", lambda *args: args)
    propose, finish, *_ = launches.launches(b, 3, 2, 8, 0.1, 0.0, 0.0, 4)
    assert waited == [launches.AHEAD_SECONDS] and launches._AHEAD == []
    assert [launcher[0] for launcher, _ in propose + finish] == [
        launches.K.products, launches.K.direction, launches.K.trial, launches.Fin.assemble,
        launches.Fin.apply]
    launches.launches(b, 3, 2, 8, 0.1, 0.0, 0.0, 4)
    assert len(waited) == 1
    from numba import config

    if config.ENABLE_CUDASIM:  # (CI's CPU runs: no GPU to compile for)
        assert launches.compile_ahead() is False and launches._AHEAD == []
