"""The long-lived `cluster` command: runs join it, Ctrl-C stops it, nothing is left behind;
the scheduler and dashboard listen on this machine only unless asked."""

from __future__ import annotations

import json
import time

import psutil
from conftest import RunningCommand

from mgpu_dask.cluster import exposure_warning
from mgpu_dask.cli import main


def _scheduler_tasks(address: str) -> int:
    from distributed import Client

    with Client(address, timeout=30) as c:
        return c.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks))


def test_two_runs_join_then_ctrl_c_leaves_nothing(tmp_path):
    cluster = RunningCommand("--workers", "2")
    address = cluster.lines["scheduler"]
    assert address.startswith("tcp://127.0.0.1:")
    assert cluster.lines["dashboard"].startswith("http://127.0.0.1:")
    assert f"--scheduler-address {address}" in cluster.lines["join it"]
    listening = [c.laddr.ip for c in psutil.Process(cluster.proc.pid).net_connections("inet")
                 if c.status == psutil.CONN_LISTEN]
    assert listening and set(listening) <= {"127.0.0.1", "::1"}
    for task in ("knn", "logreg"):
        out = tmp_path / f"{task}.json"
        assert main([task, "--dataset", "digits", "--scheduler-address", address, "--repeats", "1",
                     "--quiet", "--json", str(out)]) == 0
        result = json.loads(out.read_text())
        assert result["accuracy"] > 0.9 and result["workers"] == 2
        assert _scheduler_tasks(address) == 0  # the run released everything it placed
    rc, out, err = cluster.interrupt()
    assert rc == 0 and "cluster stopped" in out
    assert "Traceback" not in err
    time.sleep(1)
    assert not [p for p in cluster.children if p.is_running() and p.status() != "zombie"]


def test_all_interfaces_warn_in_one_line():
    assert exposure_warning(None, ":8787") is None
    assert exposure_warning("127.0.0.1", "127.0.0.1:0") is None
    line = exposure_warning("0.0.0.0", ":8787")
    assert line.startswith("warning: the scheduler and dashboard listen on all interfaces")
    assert "--host 127.0.0.1" in line and "\n" not in line
    assert "dashboard listen on all" in exposure_warning(None, "0.0.0.0:8787")


def test_a_fixed_dashboard_port_that_is_taken_is_an_error(capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        rc = main(["cluster", "--device", "cpu", "--workers", "1",
                   "--dashboard-address", f"127.0.0.1:{port}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1] == (f"error: --dashboard-address 127.0.0.1:{port}: that port is "
                                   "taken; choose another, or :0 for any free one")


def test_cluster_refuses_a_scheduler_address(capsys):
    assert main(["cluster", "--scheduler-address", "tcp://127.0.0.1:9"]) == 2
    assert "pass --scheduler-address to knn" in capsys.readouterr().err
