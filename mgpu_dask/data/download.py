"""Fetching files from mirrors: temporary file, SHA-256 check, then rename.

Nothing half-written ever carries the final name: a download goes to a
temporary file in the destination folder and is renamed into place only
after its checksum matched.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from ..exceptions import DataError

_BLOCK = 1 << 20


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


class DownloadError(DataError):
    """No mirror delivered a file with the expected checksum."""


def _fetch(url: str, dest_dir: Path, timeout: float) -> tuple[Path, str]:
    """Stream ``url`` into a temporary file in ``dest_dir``; return it and its SHA-256."""
    fd, tmp_name = tempfile.mkstemp(prefix=".part-", dir=dest_dir)
    tmp = Path(tmp_name)
    digest = hashlib.sha256()
    try:
        request = urllib.request.Request(url, headers={"User-Agent": "mgpu-dask"})
        with urllib.request.urlopen(request, timeout=timeout) as response, os.fdopen(fd, "wb") as out:
            for block in iter(lambda: response.read(_BLOCK), b""):
                digest.update(block)
                out.write(block)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp, digest.hexdigest()


def download(file_name: str, sha256: str | None, mirrors: list[str], dest_dir: Path,
             timeout: float = 30.0) -> Path:
    """Download ``file_name`` from the first mirror that serves it intact.

    Parameters
    ----------
    file_name : str
        Name appended to each mirror's base URL.
    sha256 : str or None
        Expected SHA-256; ``None`` accepts any content (used for unknown data sets only).
    mirrors : list of str
        Base URLs, tried in order.
    dest_dir : pathlib.Path
        Folder that receives ``file_name`` (created if needed).
    timeout : float, default 30.0
        Seconds allowed for each connection and read.

    Returns
    -------
    pathlib.Path
        The verified file.

    Raises
    ------
    DownloadError
        When every mirror failed; the message lists each failure.
    """
    dest_dir.mkdir(parents=True, exist_ok=True)
    failures = []
    for base in mirrors:
        url = base.rstrip("/") + "/" + file_name
        try:
            tmp, digest = _fetch(url, dest_dir, timeout)
        except urllib.error.HTTPError as exc:
            failures.append(f"{url}: HTTP {exc.code} {exc.reason}")
            continue
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            failures.append(f"{url}: {reason}")
            continue
        if sha256 is not None and digest != sha256:
            tmp.unlink(missing_ok=True)
            failures.append(f"{url}: checksum mismatch (got {digest[:12]}…, want {sha256[:12]}…)")
            continue
        final = dest_dir / file_name
        os.replace(tmp, final)
        return final
    raise DownloadError(f"could not download {file_name}: " + "; ".join(failures or ["no mirrors"]))
