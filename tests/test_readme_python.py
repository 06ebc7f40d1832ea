"""The README's Python section runs as printed, on a CPU: each code block is written to a
file and run as a script (the first starts a local cluster of CPU worker processes)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _python_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    start = text.index("## Use it from Python")
    section = text[start:text.index("\n## ", start + 1)]
    return re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)


def test_the_readme_shows_python_on_the_users_own_data():
    blocks = _python_blocks()
    assert len(blocks) >= 2
    first = blocks[0]
    for needed in ("da.from_array", "connect(", ".fit(X, y)", ".kneighbors(", ".predict(",
                   "LogisticRegression"):
        assert needed in first, needed


@pytest.mark.slow
@pytest.mark.parametrize("index", [0, 1])
def test_each_python_block_runs_as_printed(index, tmp_path):
    script = tmp_path / f"readme_{index}.py"
    script.write_text(_python_blocks()[index])
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=280,
                          env={**__import__("os").environ, "MGPU_DASK_FORCE_CPU": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip(), "the block printed nothing"
