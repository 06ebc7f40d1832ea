"""Round trips on this machine, from a socket and a thread hand-off to Dask's: submit and
result, client.run, a scheduler RPC, an actor call (plain LocalCluster with Dask's
batching intervals, then ours, then our GPU cluster).

usage: python benchmarks/round_trips.py OUT.json
"""
import os, socket, time, statistics, threading, queue, sys, json

def med(t): return round(1e3 * statistics.median(t), 3)

def sockets(n=3000):
    a, b = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        for _ in range(n):
            b.sendall(a.recv(1) if False else b.recv(1))
        os._exit(0)
    t = []
    for _ in range(n):
        s = time.perf_counter(); a.sendall(b"x"); a.recv(1); t.append(time.perf_counter() - s)
    os.waitpid(pid, 0)
    return med(t[100:])

def threads(n=3000):
    q1, q2 = queue.Queue(), queue.Queue()
    def echo():
        for _ in range(n): q2.put(q1.get())
    th = threading.Thread(target=echo); th.start(); t = []
    for _ in range(n):
        s = time.perf_counter(); q1.put(1); q2.get(); t.append(time.perf_counter() - s)
    th.join(); return med(t[100:])

def noop(): return 0

class Echo:
    def ping(self): return 0

def dask_rt(client, n=200):
    out = {}
    t = []
    for _ in range(n):
        s = time.perf_counter(); client.submit(noop, pure=False).result(); t.append(time.perf_counter() - s)
    out["submit_result"] = med(t[20:])
    t = []
    for _ in range(n):
        s = time.perf_counter(); client.run(noop); t.append(time.perf_counter() - s)
    out["client_run"] = med(t[20:])
    t = []
    for _ in range(n):
        s = time.perf_counter(); client.scheduler_info(); t.append(time.perf_counter() - s)
    out["scheduler_rpc"] = med(t[20:])
    a = client.submit(Echo, actor=True).result()
    t = []
    for _ in range(n):
        s = time.perf_counter(); a.ping().result(); t.append(time.perf_counter() - s)
    out["actor_call"] = med(t[20:])
    return out

if __name__ == "__main__":
    res = {"cpus": os.cpu_count(), "socket_rt": sockets(), "thread_rt": threads()}
    from distributed import LocalCluster, Client
    with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None) as c, Client(c) as cl:
        res["plain_default"] = dask_rt(cl)
        from mgpu_dask.parallel.latency import tighten
        tighten(cl, 0.0); res["plain_tight"] = dask_rt(cl)
    from mgpu_dask.cluster import connect
    with connect(1) as running:
        res["ours_gpu"] = dask_rt(running.client)
    print(json.dumps(res))
    open(sys.argv[1], "w").write(json.dumps(res, indent=1))
