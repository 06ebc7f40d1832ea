"""A straight call (``direct.run_held``) through Dask's RPC against the same call over a
Unix socket served by a thread in each worker (length-prefixed pickle), with a 4-byte
and a 140 KB answer: ``inline`` runs the call in the socket's thread, ``held`` hands it
to the worker's ``direct.held_calls`` (its event loop, then its task thread), as the
lane of ``parallel/lane.py`` does (the probe that lane was built on; its ``run_held``
line runs with ``mgpu-dask.cluster.straight-lane`` false: Dask's RPC).

usage: python benchmarks/lane_probe.py WORKERS  (plain CPU workers, on any machine)"""
import asyncio, os, pickle, socket, statistics, struct, sys, tempfile, threading, time
import dask
import numpy as np
from distributed import Client, LocalCluster, WorkerPlugin
from mgpu_dask.parallel import direct
from mgpu_dask.data.sharding import shard
from mgpu_dask.parallel.placement import locate

def answer(x, n):
    return np.zeros(n, np.int32)

def _recv(sock, n):
    buf = bytearray(n); view = memoryview(buf); got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if not k: raise ConnectionError
        got += k
    return buf

def _send(sock, payload):
    sock.sendall(struct.pack("<Q", len(payload)) + payload)

class Lane(WorkerPlugin):
    name = "probe-lane"
    def __init__(self, folder, mode):
        self.folder, self.mode = folder, mode
    def setup(self, worker):
        path = os.path.join(self.folder, worker.address.split(":")[-1] + self.mode)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(path); server.listen(8)
        mode = self.mode
        def serve(conn):
            while True:
                try:
                    n = struct.unpack("<Q", _recv(conn, 8))[0]
                except ConnectionError:
                    return
                calls = pickle.loads(_recv(conn, n))
                if mode == "inline":
                    out = [f(*[worker.data[a.key] if isinstance(a, direct.Held) else a for a in args])
                           for f, args in calls]
                    out = {"results": out}
                else:
                    out = asyncio.run_coroutine_threadsafe(direct.held_calls(calls, dask_worker=worker),
                                                           worker.loop.asyncio_loop).result()
                _send(conn, pickle.dumps(out, protocol=5))
        def accept():
            while True:
                conn, _ = server.accept()
                threading.Thread(target=serve, args=(conn,), daemon=True).start()
        threading.Thread(target=accept, daemon=True).start()

def med(f, n=300):
    for _ in range(20): f()
    ts = []
    for _ in range(n):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    return round(1e3 * statistics.median(ts), 3)

def main():
    n = int(sys.argv[1])
    folder = tempfile.mkdtemp()
    cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None)
    client = Client(cluster)
    q = shard(np.zeros((400, 64), np.uint8), client, timeout=30)
    futures, where = locate(client, q, remembered=True)
    for mode in ("inline", "held"):
        client.register_plugin(Lane(folder, mode), name="lane-" + mode)
    out = {}
    for size in (1, 35000):
        calls = {}
        for f, w in zip(futures, where):
            calls.setdefault(w, []).append((answer, (direct.Held(f.key), size)))
        with dask.config.set({"mgpu-dask.cluster.straight-lane": False}):
            out[f"dask run_held, answer {size * 4} B"] = med(
                lambda: direct.run_held(client, calls, 30))
        for mode in ("inline", "held"):
            socks = {}
            for w in calls:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(os.path.join(folder, w.split(":")[-1] + mode)); socks[w] = s
            def lane():
                for w, s in socks.items():
                    _send(s, pickle.dumps(calls[w], protocol=5))
                return {w: pickle.loads(_recv(s, struct.unpack("<Q", _recv(s, 8))[0])) for w, s in socks.items()}
            assert all(len(v["results"]) for v in lane().values())
            out[f"lane {mode}, answer {size * 4} B"] = med(lane)
    for k, v in out.items(): print(f"{n} workers: {k}: {v} ms")
    client.close(); cluster.close()

if __name__ == "__main__":
    main()
