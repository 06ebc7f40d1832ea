#!/usr/bin/env bash
# One device call: the PyTorch backend's tests, then KNN and logistic regression
# with every usable backend side by side on 1 GPU (MNIST; no RAPIDS: cuML rows
# say not installed).
set -u
source benchmarks/device_env.sh > /dev/null
log torch-tests; timeout 200 python3 -m pytest -q -rA tests/test_backends.py -k torch > "$OUT/torch-tests.log" 2>&1; tail -3 "$OUT/torch-tests.log" | tee -a "$OUT/summary.log"
for task in knn logreg; do
  log "$task --backend all"
  timeout 200 python3 -m mgpu_dask.run $task --backend all --workers 1 --repeats 3 --quiet \
    --json "/tmp/runs/${task}_all_w1.json" 2>&1 | tail -12 | tee -a "$OUT/summary.log"
done
tar czf "$OUT/runs.tgz" -C /tmp runs
