#!/usr/bin/env bash
# One device call after the RAPIDS parts are in (device machine, repo root):
# the GPU tests, issue 13's KNN table with every row (cuVS and cuML included),
# and the CLI's stderr of a plain `knn --workers W` run.  Everything lands in
# $OUT/tables/ as few files (a call brings back at most eight).
set -u
source benchmarks/device_env.sh > /dev/null
D=$OUT/tables; mkdir -p $D
W=$(nvidia-smi -L | wc -l)
python3 -c "import cuml, cuvs; print('cuml', cuml.__version__, 'cuvs', cuvs.__version__)" > $D/summary.log 2>&1
timeout 240 python3 -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider > $D/gpu_tests.log 2>&1
echo "gpu tests: $(tail -1 $D/gpu_tests.log)" >> $D/summary.log
timeout 400 python3 benchmarks/knn_table.py --data-dir /tmp/mnist --fractions 1,4 --workers $W \
  --json $D/knn_table.json > $D/knn_table.log 2>&1
echo "knn table rc $?" >> $D/summary.log
python3 -m mgpu_dask.run knn --workers $W --dashboard-address :0 > $D/cli_stdout.log 2> $D/cli_stderr.log
echo "cli rc $?; stderr lines: $(wc -l < $D/cli_stderr.log)" >> $D/summary.log
cat $D/summary.log
