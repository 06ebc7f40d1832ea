#!/usr/bin/env bash
# One device call: GPU stack, GPU tests, logistic regression on 1/2/4 GPUs at
# fractions 1 and 4 (MNIST, pixels in [0, 1], C=1, 100 L-BFGS iterations),
# single-host (the default; with and without CUDA graphs on 4 GPUs) and by actors.
set -u
source benchmarks/device_env.sh
log gpu-tests; timeout 300 python3 -m pytest -q -rA -m gpu tests > "$OUT/gpu-tests.log" 2>&1; grep -E "AFTER_|passed|failed|Error" "$OUT/gpu-tests.log" | tail -12 | tee -a "$OUT/summary.log"
run() {  # name, extra arguments
  log "logreg $1"
  timeout 200 python3 -m mgpu_dask.run logreg --repeats 5 --quiet --json "/tmp/runs/logreg_$1.json" "${@:2}" 2>&1 | grep -E "accuracy|warm|evaluations" | tee -a "$OUT/summary.log"
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print({k: (round(v,4) if isinstance(v,float) else v) for k,v in r['fit_profile'].items()})" "/tmp/runs/logreg_$1.json" | tee -a "$OUT/summary.log"
}
for f in 1 4; do for w in ${WORKERS:-1 2 4}; do run "f${f}_w${w}" --workers $w --fraction $f; done; done
DASK_MGPU_DASK__LOGREG__CUDA_GRAPHS=False run f1_w4_nographs --workers 4 --fraction 1
run f1_w4_actors --workers 4 --fraction 1 --comm actors
tar czf "$OUT/runs.tgz" -C /tmp runs
