#!/usr/bin/env bash
# KNN on deformed MNIST (155 copies, 8,137,500 rows) on 1 and 2 GPUs, fresh processes.
set -u
source benchmarks/device_env.sh > /dev/null
D=$OUT/deformed; mkdir -p $D
for w in 1 2; do
  s=$(date +%s%N)
  timeout 300 python3 -m mgpu_dask.run knn --workers $w --repeats 3 --dataset mnist-deformed --copies 155 --quiet --dashboard-address :0 --json $D/knn_w$w.json > $D/knn_w$w.log 2>&1
  echo "knn_w$w rc $? wall $(( ($(date +%s%N) - s) / 1000000 )) ms" | tee -a $D/summary.log
  python3 -c "import json; r=json.load(open('$D/knn_w$w.json')); print('  ', r['plan'], r['precision'], 'acc', r['accuracy'], 'warm', r['warm_predict_seconds'], {k: round(v,3) for k,v in r['cold'].items()})" | tee -a $D/summary.log
done
grep -i "error" $D/knn_w1.log | head -3
