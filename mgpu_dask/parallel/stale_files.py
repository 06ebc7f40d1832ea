"""Files in ``/dev/shm`` whose owning process has died, removed by the next process that
shares memory the same way (a killed worker cannot remove its own)."""

from __future__ import annotations

import contextlib
import glob
import os
from typing import Callable


def remove_dead(pattern: str, pid_of: Callable[[str], int]) -> int:
    """Remove every file matching ``pattern`` whose process, ``pid_of(file name)``, has
    ended; names ``pid_of`` cannot read, and processes of other users, are left alone.
    Returns how many were removed."""
    removed = 0
    for path in glob.glob(pattern):
        try:
            os.kill(pid_of(os.path.basename(path)), 0)
        except ProcessLookupError:
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed += 1
        except (ValueError, IndexError, PermissionError, OSError):
            continue
    return removed
