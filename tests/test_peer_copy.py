"""Arrays handed GPU to GPU between one host's workers (``parallel.peer_copy``): where a
copy cannot be made the caller is told so (and sends the array through host memory);
inboxes are lent and given back; on a GPU, a straight predict's shard holders hand each
other query blocks and candidates that way, and predict what one worker predicts."""

from __future__ import annotations

import numpy as np
import pytest

from mgpu_dask.config.environment import has_gpu
from mgpu_dask.parallel import peer_copy


def test_no_inbox_and_no_copy_without_a_gpu():
    if has_gpu():
        pytest.skip("this machine has a GPU")
    assert peer_copy.take(1 << 20) is None


@pytest.mark.parametrize("desc", [
    None,
    {"host": "another-host", "pid": 1, "capacity": 1 << 30, "box": 1, "handle": b"",
     "pci_bus_id": "0000:00:00.0"}])
def test_a_copy_that_cannot_be_made_says_none(desc):
    assert peer_copy.copy_into(desc, np.zeros(4)) is None  # a host array, or no inbox


class _Box:
    def __init__(self, box: int, capacity: int, device: int = 0) -> None:
        self.id, self.capacity, self.device = box, capacity, device


def test_inboxes_are_lent_until_given_back_and_reused_smallest_first(monkeypatch):
    """An inbox given back is free again, never freed (another process may map it); the
    smallest free one that fits is lent next, on the current GPU."""
    monkeypatch.setattr(peer_copy, "_FREE", [])
    monkeypatch.setattr(peer_copy, "_LENT", {})
    small, large = _Box(1, 1 << 20), _Box(2, 4 << 20)
    peer_copy._LENT.update({1: small, 2: large})
    assert peer_copy.lent(1) is small
    peer_copy.give_back(small, 2, None, 99)  # by box or id; unknown ids are ignored
    assert peer_copy.lent(1) is None and peer_copy._FREE == [small, large]
    if has_gpu():
        import cupy

        monkeypatch.setattr(small, "device", cupy.cuda.Device().id)
        monkeypatch.setattr(large, "device", cupy.cuda.Device().id)
        assert peer_copy.take(2 << 20) is large and peer_copy.take(1) is small
        assert peer_copy._FREE == [] and peer_copy.lent(2) is large


def test_candidates_in_an_inbox_not_lent_fall_back():
    """A deposit naming an inbox this process no longer lends is refused (KeyError: the
    straight predict answers None and tasks take over)."""
    from mgpu_dask.knn import exchange

    host = np.zeros((2, 3, 3))
    assert exchange._in_place(host) is host
    with pytest.raises(KeyError):
        exchange._in_place(peer_copy.Landed(10**9, (2, 3, 3), "<f8"))


def _predicted(n_workers: int, X, y, Q) -> tuple[np.ndarray, int, bool]:
    import dask
    from distributed import Client
    from shared_gpu import shared_gpu_cluster

    from mgpu_dask.data import shard
    from mgpu_dask.knn import KNeighborsClassifier
    from mgpu_dask.parallel import placement
    from mgpu_dask.parallel.inputs import to_host

    with shared_gpu_cluster(n_workers) as address, Client(address) as client, \
            client.as_current(), dask.config.set({"mgpu-dask.knn.one-search-per-gpu": False}):
        Xd, yd = shard(X, client), shard(y, client)
        clf = KNeighborsClassifier(5, plan="shard").fit(Xd, yd)
        got = clf.predict(shard(Q, client), on_host=True)
        copies = sum(client.run(lambda: peer_copy.COPIED[0]).values())
        return to_host(got), copies, placement.blocks_in_hand(got) is not None


@pytest.mark.gpu
@pytest.mark.slow
def test_shard_holders_hand_blocks_and_candidates_gpu_to_gpu():
    if not has_gpu():
        pytest.skip("no GPU")
    rng = np.random.default_rng(3)
    X = rng.standard_normal((6000, 24)).astype(np.float32)
    y = rng.integers(0, 5, 6000)
    Q = rng.standard_normal((3000, 24)).astype(np.float32)
    alone, _, _ = _predicted(1, X, y, Q)
    got, copies, straight = _predicted(2, X, y, Q)
    np.testing.assert_array_equal(got, alone)
    assert straight
    # each holder's block to the other, and each block's candidates back to its holder
    assert copies >= 4, copies
