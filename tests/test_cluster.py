from __future__ import annotations

import time

import pytest

import mgpu_dask.cluster.plan as cluster_mod
from mgpu_dask.config import environment as _compat
from mgpu_dask.parallel.workers import scheduler_workers
from mgpu_dask.cluster import ClusterKind, connect, plan_cluster
from mgpu_dask.exceptions import ClusterError


@pytest.fixture
def fake_gpus(monkeypatch):
    def install(n, with_cuda_stack=True):
        gpus = tuple(_compat.GPU(i, "Fake GPU", 2**34) for i in range(n))
        monkeypatch.setattr(cluster_mod, "visible_gpus", lambda: gpus)
        monkeypatch.setattr(cluster_mod, "gpu_count", lambda: n)
        monkeypatch.setattr(cluster_mod, "is_installed", lambda name: with_cuda_stack)
    return install


def test_cpu_plan_without_gpus(fake_gpus):
    fake_gpus(0)
    plan = plan_cluster(3)
    assert plan.kind is ClusterKind.LOCAL_CPU and plan.n_workers == 3 and plan.device == "cpu"


def test_gpu_plan_one_worker_per_gpu(fake_gpus):
    fake_gpus(4)
    plan = plan_cluster()
    assert plan.kind is ClusterKind.LOCAL_CUDA and plan.n_workers == 4
    assert plan.gpu_indices == (0, 1, 2, 3)
    assert plan_cluster(2).gpu_indices == (0, 1)


def test_more_workers_than_gpus_is_an_error(fake_gpus):
    fake_gpus(4)
    with pytest.raises(ClusterError, match="--workers 8 .* 4 GPU"):
        plan_cluster(8)


def test_gpu_requested_without_gpu(fake_gpus):
    fake_gpus(0)
    with pytest.raises(ClusterError, match="no NVIDIA GPU"):
        plan_cluster(device="gpu")


def test_gpus_without_dask_cuda_fall_back_with_note(fake_gpus):
    fake_gpus(2, with_cuda_stack=False)
    plan = plan_cluster()
    assert plan.device == "cpu" and "dask-cuda" in plan.note
    with pytest.raises(ClusterError, match="pip install"):
        plan_cluster(device="gpu")


@pytest.mark.parametrize("kwargs", [{"workers": 0}, {"device": "tpu"}])
def test_bad_arguments(kwargs):
    with pytest.raises(ClusterError):
        plan_cluster(**kwargs)


def test_visible_devices_filter(monkeypatch):
    gpus = [_compat.GPU(i, "g", 1) for i in range(4)]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    assert [g.index for g in _compat._visible_filter(gpus)] == [2, 0]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert _compat._visible_filter(gpus) == []


def test_connect_local_cpu_and_join_by_address(fake_gpus):
    fake_gpus(0)
    with connect(2, device="cpu", dashboard_address=":0", timeout=60) as rc:
        assert len(scheduler_workers(rc.client)) == 2
        assert rc.start_seconds > 0 and rc.dashboard_link.startswith("http")
        assert rc.client.submit(sum, [1, 2]).result(timeout=30) == 3
        with connect(scheduler_address=rc.client.scheduler.address, timeout=10) as joined:
            assert joined.plan.kind is ClusterKind.ADDRESS
            assert len(scheduler_workers(joined.client)) == 2
        workers_client = rc.client
    assert workers_client.status == "closed"


def test_unreachable_scheduler_fails_within_timeout():
    started = time.perf_counter()
    with pytest.raises(ClusterError, match="no Dask scheduler answered at tcp://127.0.0.1:9"):
        with connect(scheduler_address="tcp://127.0.0.1:9", timeout=2):
            pass
    assert time.perf_counter() - started < 30


def _intervals(client):
    def on_scheduler(dask_scheduler):
        return ([c.interval for c in dask_scheduler.stream_comms.values()],
                [c.interval for c in dask_scheduler.client_comms.values()])

    workers, clients = client.run_on_scheduler(on_scheduler)
    on_workers = client.run(lambda dask_worker: dask_worker.batched_stream.interval)
    return client.scheduler_comm.interval, workers, clients, sorted(on_workers.values())


@pytest.mark.parametrize("setting, seconds", [("0ms", 0.0), ("3ms", 0.003)])
def test_connect_sets_every_batched_send_interval(fake_gpus, setting, seconds):
    """Client, scheduler (to each worker and client) and workers, present and later ones."""
    import dask

    fake_gpus(0)
    with dask.config.set({"mgpu-dask.cluster.batched-send-interval": setting}), \
            connect(2, device="cpu", dashboard_address=":0", timeout=60) as rc:
        client = rc.client
        assert client.direct_to_workers  # a local cluster's results come from the workers
        mine, to_workers, to_clients, workers = _intervals(client)
        assert mine == seconds and workers == [seconds, seconds]
        assert to_workers == [seconds, seconds] and seconds in to_clients
        from distributed import Client

        with Client(client.scheduler.address, timeout=30):  # a later client
            to_clients = _intervals(client)[2]
            assert len(to_clients) >= 2 and set(to_clients) == {seconds}, to_clients
        cluster = client.cluster
        cluster.scale(3)  # a later worker
        client.wait_for_workers(3, timeout=60)
        assert _intervals(client)[1] == [seconds] * 3
        assert _intervals(client)[3] == [seconds] * 3


def test_what_a_worker_has_is_asked_once_per_set_of_workers(process_client, monkeypatch):
    """Every fit asks whether the workers have GPUs and which: one round trip to the
    workers per client and set of workers, not one per fit; a new worker is asked."""
    from mgpu_dask.parallel import workers

    asked = []
    run = process_client.run
    monkeypatch.setattr(process_client, "run",
                        lambda fn, *a, **k: asked.append(fn.__name__) or run(fn, *a, **k))
    workers._FIXED.pop(process_client, None)
    first = workers.fixed_facts(process_client)
    assert set(first) == set(scheduler_workers(process_client))
    assert all(f.gpu == (f.capability is not None) == (f.gpu_bytes is not None)
               for f in first.values())
    assert workers.detect_device(process_client) in ("cpu", "gpu")
    workers.fixed_facts(process_client)
    assert asked == ["_fixed_facts"]
    workers._FIXED[process_client] = {"tcp://gone:1": workers.Facts(False, None, None)}  # asked again
    assert workers.fixed_facts(process_client) == first and asked == ["_fixed_facts"] * 2


def test_a_clusters_own_client_checks_the_workers_without_a_round_trip(monkeypatch):
    """With the client's cluster object at hand, whether the set of workers changed is
    read from the copy the scheduler keeps current there: a warm check asks the
    scheduler nothing, and a worker that joins is seen and asked what it has.  A client
    given only an address asks the scheduler."""
    from distributed import Client, LocalCluster

    from mgpu_dask.parallel import workers

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        first = workers.fixed_facts(client)
        assert set(first) == workers.pushed_workers(client) and len(first) == 1
        asked = []
        monkeypatch.setattr(client, "scheduler_info",
                            lambda *a, **k: asked.append("scheduler") or {"workers": {}})
        assert workers.fixed_facts(client) is first and asked == []
        cluster.scale(2)
        client.wait_for_workers(2, timeout=60)
        deadline = time.monotonic() + 30
        while len(workers.pushed_workers(client)) < 2:  # the copy follows by message
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert len(workers.fixed_facts(client)) == 2 and asked == []
        with Client(cluster.scheduler_address) as by_address:
            assert workers.pushed_workers(by_address) == set()
            monkeypatch.setattr(by_address, "scheduler_info",
                                lambda *a, **k: asked.append("scheduler") or {
                                    "workers": dict.fromkeys(workers.pushed_workers(client))})
            assert len(workers.fixed_facts(by_address)) == 2 and asked == ["scheduler"]
