#!/usr/bin/env bash
# One device call: GPU stack, GPU tests, logistic regression on 1/2/4 GPUs at
# fractions 1 and 4 (MNIST, pixels in [0, 1], C=1, 100 L-BFGS iterations).
set -u
source benchmarks/device_env.sh
log gpu-tests; timeout 300 python3 -m pytest -q -rA -m gpu tests > "$OUT/gpu-tests.log" 2>&1; grep -E "AFTER_|passed|failed|Error" "$OUT/gpu-tests.log" | tail -12 | tee -a "$OUT/summary.log"
for f in 1 4; do for w in ${WORKERS:-1 2 4}; do
  log "logreg fraction $f workers $w"
  timeout 300 python3 -m mgpu_dask.run logreg --workers $w --fraction $f --quiet --json "/tmp/runs/logreg_f${f}_w${w}.json" 2>&1 | tail -5 | tee -a "$OUT/summary.log"
done; done
tar czf "$OUT/runs.tgz" -C /tmp runs
