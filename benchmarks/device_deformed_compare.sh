#!/usr/bin/env bash
# Deformed MNIST (COPIES copies, default 155) side by side with cuML's multi-GPU
# estimators on the same generated rows, all GPUs (needs the RAPIDS parts).
set -u
source benchmarks/device_env.sh > /dev/null
D=$OUT/compare; mkdir -p $D
W=$(nvidia-smi -L | wc -l)
C=${COPIES:-155}
for task in knn logreg; do
  s=$(date +%s%N)
  [ $task = knn ] && T=${T_KNN:-280} || T=${T_LOGREG:-280}
  timeout $T python3 -m mgpu_dask.run $task --dataset mnist-deformed --copies $C --workers $W \
    --backend all --repeats 1 --quiet --dashboard-address :0 --json $D/$task.json > $D/$task.log 2>&1
  echo "$task rc $? wall $(( ($(date +%s%N) - s) / 1000000 )) ms" >> $D/summary.log
  tail -6 $D/$task.log >> $D/summary.log
done
cat $D/summary.log
