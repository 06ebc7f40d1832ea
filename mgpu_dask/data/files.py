"""Atomic result files: write a temporary file beside the target, then rename."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` so that readers see the old file or the whole new one."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def write_json(path: str | Path, payload: Any) -> Path:
    """Atomically write ``payload`` as indented JSON."""
    return write_text_atomic(path, json.dumps(payload, indent=2, default=str) + "\n")


@contextlib.contextmanager
def atomic_file(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` (same suffix) for a writer that wants a file name;
    renamed onto ``path`` when the block ends without error, removed otherwise."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part" + target.suffix,
                               dir=target.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, target)
    finally:
        Path(tmp).unlink(missing_ok=True)
