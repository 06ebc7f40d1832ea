"""What a user could pick instead of our estimators, run on the same split and cluster.

Each backend module offers ``knn(run)`` and ``logreg(run)`` taking a
:class:`BackendRun` and returning one cold and the warm repetitions of
``{"fit": s, "predict": s, "accuracy": a}``, the last test predictions, and a
note.  ``unavailable(name, device)`` says in one line why a backend cannot
run here, or ``None``; :func:`module` finds a backend's module by its name.
The backends use our public pieces (kernels, placement), never the
estimators' internals.
"""

from __future__ import annotations

from .backend import BACKENDS, BackendRun, BackendSkipped, module, unavailable

__all__ = ["BACKENDS", "BackendRun", "BackendSkipped", "module", "unavailable"]
