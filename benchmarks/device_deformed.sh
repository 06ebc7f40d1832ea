#!/usr/bin/env bash
# Deformed MNIST on the GPUs (device machine, repo root): KNN and logistic
# regression on COPIES copies (default 155: 8,137,500 training rows) with 1 and
# W GPUs, one fresh process each; summary and JSON under $OUT/deformed/.
set -u
source benchmarks/device_env.sh > /dev/null
D=$OUT/deformed; mkdir -p $D
W=$(nvidia-smi -L | wc -l)
C=${COPIES:-155}
run() {  # name, args...
  local name=$1; shift
  local s=$(date +%s%N)
  timeout 400 python3 -m mgpu_dask.run "$@" --dataset mnist-deformed --copies $C --quiet \
    --dashboard-address :0 --json $D/$name.json > $D/$name.log 2>&1
  echo "$name: rc $? wall $(( ($(date +%s%N) - s) / 1000000 )) ms" >> $D/summary.log
  python3 - "$D/$name.json" >> $D/summary.log 2>&1 <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
warm = r.get("warm_predict_median") or r.get("warm_fit_predict_median")
print("  ", r["n_train"], "rows, plan", r.get("plan"), "acc", round(r["accuracy"], 4),
      "warm", round(warm * 1e3, 1), "ms", {k: round(v, 3) for k, v in r["cold"].items()})
PY
}
python3 benchmarks/deform_gen.py --copies $C > $D/gen.log 2>&1; tail -4 $D/gen.log >> $D/summary.log
for w in 1 $W; do run knn_w$w knn --workers $w --repeats 3; done
for w in 1 $W; do run logreg_w$w logreg --workers $w --repeats 2; done
cat $D/summary.log
