import traceback, numpy as np
from mgpu_dask.cluster import connect
from mgpu_dask.data import load_dataset, shard, split
from mgpu_dask.knn import to_host
if __name__ == "__main__":
    ds = load_dataset("digits"); s = split(ds.X, ds.y)
    with connect(2, dashboard_address=":0") as rc, rc.client.as_current():
        c = rc.client
        X = shard(s.X_train, c, dtype=np.float32); y = shard(s.y_train, c, dtype=np.int32); Q = shard(s.X_test, c, dtype=np.float32)
        print("X meta", type(X._meta), "y meta", type(y._meta), y.chunks)
        from cuml.dask.neighbors import KNeighborsClassifier
        try:
            m = KNeighborsClassifier(n_neighbors=3, client=c).fit(X, y)
            p = m.predict(Q); print(type(p), getattr(p, "_meta", None)); print((to_host(p) == s.y_test).mean())
        except Exception: traceback.print_exc()
        from cuml.dask.linear_model import LogisticRegression
        try:
            yf = shard(s.y_train, c, dtype=np.float32)
            m = LogisticRegression(client=c).fit(X / 16, yf)
            p = m.predict(Q / 16); print(type(p)); print((to_host(p).astype(int) == s.y_test).mean())
        except Exception: traceback.print_exc()
