"""What both estimators share on Dask: blocks pinned to the worker that holds their
shard (:mod:`.placement`, :mod:`.recovery`, our plugins registered once per client by
:mod:`.plugins`), views of other workers' shards
(:mod:`.peer_views`), message batching (:mod:`.latency`), the workers
(:mod:`.workers`), functions only the workers import (:mod:`.by_name`), and
input checks and labels (:mod:`.inputs`, :mod:`.labels`).

Nothing here starts a cluster: every function takes the client it works with.
"""
