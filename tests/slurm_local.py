"""A real single-node SLURM (Debian's slurm-wlm + munge) on this machine, for tests.

Started by the ``slurm`` fixture when the packages are installed and we are
root (``.ci/run`` installs them); skipped cleanly otherwise.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

CONF = """ClusterName=mgpu-test
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort={port}
SlurmdPort={dport}
MessageTimeout=5
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName={host} CPUs={cpus} RealMemory={mem} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


def available() -> str | None:
    """Why a local SLURM cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "starting slurmd needs root"
    for exe in ("slurmctld", "slurmd", "munged", "sinfo", "sbatch"):
        if shutil.which(exe) is None:
            return f"{exe} not installed (apt-get install slurmctld slurmd slurm-client munge)"
    if not Path("/etc/munge/munge.key").exists():
        return "no /etc/munge/munge.key"
    return None


def _memory_mb() -> int:
    with open("/proc/meminfo") as f:
        total_kb = int(next(line for line in f if line.startswith("MemTotal")).split()[1])
    return max(1024, total_kb // 1024 - 1024)


def write_conf(root: Path, port: int, dport: int) -> Path:
    for sub in ("state", "spool"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    conf = root / "slurm.conf"
    conf.write_text(CONF.format(host=socket.gethostname().split(".")[0], port=port, dport=dport,
                                root=root, cpus=os.cpu_count() or 1, mem=_memory_mb()))
    return conf


def _munge_running() -> bool:
    return subprocess.run(["sh", "-c", "munge -n | unmunge"], capture_output=True).returncode == 0


def start(root: Path, port: int = 16917, dport: int = 16918) -> tuple[Path, list[int]]:
    """Start munged (if needed), slurmctld and slurmd; wait for an idle node."""
    started: list[int] = []
    if not _munge_running():
        Path("/run/munge").mkdir(parents=True, exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        subprocess.run(["runuser", "-u", "munge", "--", "munged"], check=True)
        time.sleep(0.5)
        started.append(int(Path("/run/munge/munged.pid").read_text().strip())
                       if Path("/run/munge/munged.pid").exists() else -1)
    conf = write_conf(root, port, dport)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    subprocess.run(["slurmctld", "-f", str(conf)], check=True, env=env)
    subprocess.run(["slurmd", "-f", str(conf)], check=True, env=env)
    deadline = time.time() + 60
    while time.time() < deadline:
        out = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True,
                             env=env).stdout.strip()
        if out == "idle":
            return conf, started
        time.sleep(0.5)
    raise RuntimeError(f"local SLURM did not become idle; see {root}/slurmctld.log")


def stop(root: Path, conf: Path, started: list[int]) -> None:
    env = {**os.environ, "SLURM_CONF": str(conf)}
    subprocess.run(["scancel", "--full", "-u", "root"], env=env, capture_output=True)
    for name in ("slurmd", "slurmctld"):
        pidfile = root / f"{name}.pid"
        if pidfile.exists():
            try:
                os.kill(int(pidfile.read_text().strip()), signal.SIGTERM)
            except (ProcessLookupError, ValueError):
                pass
    for pid in started:
        if pid > 0:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


def queue(conf: Path) -> list[str]:
    """Job ids still known to SLURM (pending or running)."""
    env = {**os.environ, "SLURM_CONF": str(conf)}
    out = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, env=env)
    return out.stdout.split()
