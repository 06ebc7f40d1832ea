#!/usr/bin/env bash
# One device call: GPU stack, GPU tests, logistic regression on 1/2/4 GPUs at
# fractions 1 and 4 (MNIST, pixels in [0, 1], C=1, 100 L-BFGS iterations),
# single-host (the default) and, on 4 GPUs, by actors; then the worker-kill run.
set -u
source benchmarks/device_env.sh
log gpu-tests; timeout 300 python3 -m pytest -q -rA -m gpu tests > "$OUT/gpu-tests.log" 2>&1; grep -E "AFTER_|passed|failed|Error" "$OUT/gpu-tests.log" | tail -12 | tee -a "$OUT/summary.log"
for f in 1 4; do for w in ${WORKERS:-1 2 4}; do
  log "logreg fraction $f workers $w"
  timeout 200 python3 -m mgpu_dask.run logreg --workers $w --fraction $f --repeats 5 --quiet --json "/tmp/runs/logreg_f${f}_w${w}.json" 2>&1 | tail -5 | tee -a "$OUT/summary.log"
done
  log "logreg fraction $f workers 4 comm actors"
  timeout 200 python3 -m mgpu_dask.run logreg --workers 4 --fraction $f --comm actors --quiet --json "/tmp/runs/logreg_f${f}_w4_actors.json" 2>&1 | tail -3 | tee -a "$OUT/summary.log"
done
log worker-kill; timeout 300 python3 benchmarks/worker_kill.py --data-dir /tmp/mnist > /tmp/runs/worker_kill.json 2> "$OUT/worker_kill.err"; tail -c 3000 /tmp/runs/worker_kill.json | tee -a "$OUT/summary.log"; tail -5 "$OUT/worker_kill.err"
tar czf "$OUT/runs.tgz" -C /tmp runs
