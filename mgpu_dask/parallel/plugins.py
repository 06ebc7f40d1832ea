"""Our Dask plugins, registered once per client.

Several of our functions need a plugin on the cluster before their first
graph (:class:`~.recovery.PinRecovery` on the scheduler, the int8 levels'
release on the workers) and are called for every fit and predict.
:func:`register_once` registers each plugin the first time a client needs it
and remembers the outcome for that client: a cluster that could not load it
(mgpu_dask missing on the scheduler, say) is not asked again, and the caller
can say why it went without.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

_OUTCOMES: "weakref.WeakKeyDictionary[Any, dict[str, str | None]]" = weakref.WeakKeyDictionary()
"""Per client, per plugin name: None where it is registered, else why it is not."""


def register_once(client: Any, name: str, make: Callable[[], Any]) -> str | None:
    """Register the plugin ``make()`` on ``client``'s cluster, once per client.

    Parameters
    ----------
    client : distributed.Client
    name : str
        The plugin's name (what the outcome is remembered under).
    make : callable
        Makes the plugin; called inside the attempt, so a plugin that cannot be
        made counts as one that did not load.

    Returns
    -------
    str or None
        None where the plugin is registered, else why not (``Type: message``),
        the same answer on every later call with this client.
    """
    try:
        outcomes = _OUTCOMES.setdefault(client, {})
    except TypeError:  # pragma: no cover - a client that cannot be weakly referenced
        outcomes = {}
    if name not in outcomes:
        try:
            client.register_plugin(make())
            outcomes[name] = None
        except Exception as exc:  # the scheduler or a worker could not unpickle it
            outcomes[name] = f"{type(exc).__name__}: {exc}"
    return outcomes[name]


def refused(client: Any, name: str) -> str | None:
    """Why the plugin ``name`` is not on ``client``'s cluster (None: it is, or it was not
    asked for yet)."""
    try:
        return _OUTCOMES.get(client, {}).get(name)
    except TypeError:  # pragma: no cover
        return None
