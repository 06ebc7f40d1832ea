#!/usr/bin/env bash
# One device call: GPU stack, GPU tests, logistic regression on 1/2/4 GPUs at
# fractions 1 and 4 (MNIST, pixels in [0, 1], C=1, 100 L-BFGS iterations).
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /tmp/runs
bash .gpu/gpu-stack-install > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
source /tmp/gpu-stack.env
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export MGPU_DASK_DATA_DIR=$PWD/.mnist MGPU_DASK_TEST_MNIST_DIR=$PWD/.mnist
log() { echo "== $*" | tee -a "$OUT/summary.log"; }
log gpu-tests; timeout 300 python3 -m pytest -q -rA -m gpu tests > "$OUT/gpu-tests.log" 2>&1; grep -E "AFTER_|passed|failed|Error" "$OUT/gpu-tests.log" | tail -12 | tee -a "$OUT/summary.log"
for f in 1 4; do for w in ${WORKERS:-1 2 4}; do
  log "logreg fraction $f workers $w"
  timeout 300 python3 -m mgpu_dask.run logreg --workers $w --fraction $f --quiet --json "/tmp/runs/logreg_f${f}_w${w}.json" 2>&1 | tail -5 | tee -a "$OUT/summary.log"
done; done
tar czf "$OUT/runs.tgz" -C /tmp runs
