"""The leader's own copies of other workers' shards on their GPUs (``logreg.own_copies``):
kernels read a CUDA IPC mapping more slowly than memory of their own process."""

from __future__ import annotations

import time

import numpy as np
import pytest

from mgpu_dask.logreg import own_copies


def test_a_copy_takes_at_most_its_share_of_the_free_memory():
    free = 1000
    assert own_copies.room_for(int(own_copies.ROOM_SHARE * free), free)
    assert not own_copies.room_for(int(own_copies.ROOM_SHARE * free) + 1, free)


def test_host_rows_and_this_processs_own_shards_stay_as_they_are():
    X, y = np.ones((4, 2), np.float32), np.zeros(4, np.int32)
    arrays = [(X, y), (X, y, np.ones(4))]
    out, copied = own_copies.of_mapped(arrays, [True, False])
    assert copied == 0 and all(a is b for o, a_ in zip(out, arrays) for a, b in zip(o, a_))


@pytest.mark.gpu
def test_the_leader_fits_its_own_copy_of_another_workers_shard():
    """Two workers sharing GPU 0, their shards not joined (``joined.JOIN_BYTES`` 0 on the
    workers): the leader copies the other worker's shard and fits the copy, to the
    objective of the fit that reads the mapping; the next fit takes the kept copy up."""
    from distributed import Client
    from shared_gpu import shared_gpu_cluster

    from mgpu_dask.data import shard
    from mgpu_dask.logreg import LogisticRegression
    from mgpu_dask.parallel import kept_with_blocks

    rng = np.random.default_rng(6)
    X = rng.standard_normal((60_000, 24)).astype(np.float32)
    y = np.argmax(X @ rng.standard_normal((24, 4)) + rng.gumbel(size=(60_000, 4)), axis=1)
    fits = {}
    with shared_gpu_cluster(2) as address, Client(address) as client, client.as_current():
        client.run(exec, "import mgpu_dask.logreg.joined as j; j.JOIN_BYTES = 0")
        for room in (0.0, own_copies.ROOM_SHARE):
            client.run(exec, f"import mgpu_dask.logreg.own_copies as o; o.ROOM_SHARE = {room}")
            Xd = shard(X, client)
            yd = shard(y, client, like=Xd)
            model = LogisticRegression(C=0.5, max_iter=300, tol=1e-6)
            fits[room] = [model.fit(Xd, yd).fit_profile_ | {"loss": model.loss_}
                          for _ in range(2)]
            del Xd, yd  # the rows go, and what the fits kept with them
            deadline = time.monotonic() + 30
            while sum(client.run(kept_with_blocks.kept).values()) and time.monotonic() < deadline:
                time.sleep(0.1)
    mapped, copied = fits[0.0], fits[own_copies.ROOM_SHARE]
    assert copied[0]["peer shards copied"] == 1 and mapped[0]["peer shards copied"] == 0
    assert copied[0]["shards joined"] == 0
    assert copied[1].get("mapped kept") and copied[1].get("state kept")
    for fit in copied:
        assert abs(fit["loss"] - mapped[0]["loss"]) <= 1e-6 * mapped[0]["loss"]
