#!/usr/bin/env bash
# The sklearn-API GPU tests again, and KNN warm predict at fractions 1 and 4 on
# 1 and 2 GPUs (2 GPUs three times, 20 repeats each), for run-to-run spread.
set -u
source benchmarks/device_env.sh > /dev/null
D=$OUT/rerun; mkdir -p $D
timeout 200 python3 -m pytest -q -m gpu tests/test_gpu.py -k "sklearn_api or local_cuda_cluster" -p no:cacheprovider > $D/gpu_tests.log 2>&1
echo "gpu tests: $(tail -1 $D/gpu_tests.log)" | tee $D/summary.log
for f in 1 4; do for w in 1 2 2 2; do
python3 -m mgpu_dask.run knn --workers $w --fraction $f --repeats 20 --quiet --dashboard-address :0 --json $D/r.json > /dev/null 2>&1
python3 -c "import json; r=json.load(open('$D/r.json')); print('f$f w$w', round(r['warm_predict_median']*1e3,2), 'ms', r['accuracy'])" | tee -a $D/summary.log
done; done
