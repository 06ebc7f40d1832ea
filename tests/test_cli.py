from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from mgpu_dask.cli import main
from mgpu_dask.cli.parser import build_parser


def test_parser_reads_common_options():
    args = build_parser().parse_args(["data", "--dataset", "digits", "--fraction", "2",
                                      "--workers", "3", "--seed", "7", "--test-size", "0.5"])
    assert (args.dataset, args.fraction, args.workers, args.seed, args.test_size) == \
        ("digits", 2.0, 3, 7, 0.5)


def test_info(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "backends:" in out and "cluster: would start" in out
    assert main(["info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["versions"]["dask"] and "numba-cpu" in info["backends"]
    from mgpu_dask.compare import BACKENDS

    assert set(BACKENDS) - {"numba"} <= set(info["backends"])  # every --backend row, by name
    assert info["backends"]["torch"] == info["backends"]["torch-script"] == (
        importlib.util.find_spec("torch") is not None)


def test_data_summary(capsys):
    assert main(["data", "--dataset", "digits", "--fraction", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "dataset digits: 1797 samples x 64 features" in out
    assert "train 674, test 224" in out


def test_data_real_mnist_verify(capsys, mnist_dir):
    assert main(["data", "--dataset", "mnist", "--data-dir", str(mnist_dir), "--verify"]) == 0
    out = capsys.readouterr().out
    assert "70000 samples x 784 features" in out and "checksums verified" in out


def test_data_shard_on_cpu_cluster(capsys):
    assert main(["data", "--dataset", "digits", "--shard", "--workers", "2", "--device", "cpu",
                 "--dashboard-address", ":0"]) == 0
    out = capsys.readouterr().out
    assert out.count("as numpy.ndarray (host)") == 2 and "dashboard http" in out


@pytest.mark.parametrize("argv, match", [
    (["data", "--dataset", "cifar"], "unknown dataset"),
    (["data", "--test-size", "2"], "between 0 and 1"),
    (["data", "--dataset", "digits", "--fraction", "-1"], "positive"),
    (["data", "--dataset", "digits", "--shard", "--device", "gpu"], "no NVIDIA GPU"),
])
def test_bad_input_is_one_line(capsys, argv, match, monkeypatch):
    monkeypatch.setenv("MGPU_DASK_FORCE_CPU", "1")
    from mgpu_dask.config import environment as _compat
    _compat.visible_gpus.cache_clear()
    try:
        assert main(argv) == 2
    finally:
        _compat.visible_gpus.cache_clear()
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and match in err and "\n" not in err


def test_subprocess_error_has_no_traceback(tmp_path):
    env = {**os.environ, "MGPU_DASK_CACHE_DIR": str(tmp_path / "cache"),
           "DASK_MGPU_DASK__DATA__DOWNLOAD": "False"}
    proc = subprocess.run([sys.executable, "-m", "mgpu_dask.run", "data", "--dataset", "mnist",
                           "--data-dir", str(tmp_path)], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: mnist files not found") and proc.stderr.count("\n") == 1


def test_subprocess_offline_default_falls_back(tmp_path):
    env = {**os.environ, "MGPU_DASK_CACHE_DIR": str(tmp_path / "cache"),
           "DASK_MGPU_DASK__DATA__DOWNLOAD": "False"}
    env.pop("MGPU_DASK_DATA_DIR", None)
    proc = subprocess.run([sys.executable, "-m", "mgpu_dask.run", "data"], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stdout.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "digits" in notes[0]
    assert "dataset digits" in proc.stdout


def _documented_commands() -> list[tuple[str, list[str]]]:
    """Every ``python -m mgpu_dask.run ...`` line of the README files' code blocks."""
    import re
    import shlex
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    found = []
    for doc in (root / "README.md", root / "deploy" / "README.md"):
        for lang, block in re.findall(r"```(\w*)\n(.*?)```", doc.read_text(), re.S):
            if lang not in ("", "bash", "sh"):  # (every fence paired: python blocks too)
                continue
            for line in block.replace("\\\n", " ").splitlines():
                line = line.split("  #")[0].strip()
                if line.startswith("python -m mgpu_dask.run "):
                    argv = shlex.split(line.replace("$HOME", "/home/user"))[3:]
                    found.append((f"{doc.name}: {line}", argv))
    return found


def test_every_documented_command_parses():
    """The README's commands use real subcommands and flags (parsed, not run)."""
    from mgpu_dask.cli.parser import build_parser

    commands = _documented_commands()
    assert len(commands) >= 10
    parser = build_parser()
    for where, argv in commands:
        try:
            args, extra = parser.parse_known_args(argv)
        except SystemExit:
            raise AssertionError(f"does not parse: {where}") from None
        assert not extra or args.command == "workflow", f"unknown options in {where}: {extra}"
