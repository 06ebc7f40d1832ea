"""A plugin is registered once per client; one that cannot be made or loaded is a reason,
remembered, not an exception."""

from __future__ import annotations

from mgpu_dask.parallel import plugins


class _Client:
    def __init__(self, fail: bool = False) -> None:
        self.fail, self.registered = fail, []

    def register_plugin(self, plugin):
        self.registered.append(plugin)
        if self.fail:
            raise RuntimeError("no mgpu_dask there")


def test_each_plugin_is_registered_once_per_client():
    a, b = _Client(), _Client()
    assert plugins.register_once(a, "p", object) is None
    assert plugins.register_once(a, "p", object) is None
    assert plugins.register_once(a, "q", object) is None
    assert plugins.register_once(b, "p", object) is None
    assert len(a.registered) == 2 and len(b.registered) == 1
    assert plugins.refused(a, "p") is None


def test_a_plugin_that_does_not_load_or_cannot_be_made_is_a_remembered_reason():
    client = _Client(fail=True)
    why = plugins.register_once(client, "p", object)
    assert why == "RuntimeError: no mgpu_dask there"
    assert plugins.register_once(client, "p", object) == why and len(client.registered) == 1
    assert plugins.refused(client, "p") == why

    def unmade():
        raise ValueError("cannot unpickle")

    other = _Client()
    assert plugins.register_once(other, "p", unmade) == "ValueError: cannot unpickle"
    assert other.registered == [] and plugins.refused(other, "never asked") is None
