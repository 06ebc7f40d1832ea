#!/usr/bin/env bash
# One device call: GPU stack, the logistic-regression probe (host cost per
# operation, milliseconds per evaluation bare and inside a worker), GPU tests,
# then logistic regression on 1/2/4 GPUs at fractions 1 and 4 (MNIST, pixels
# in [0, 1], C=1, 100 L-BFGS iterations) with fit profiles.
# PROBE=0 skips the probe, TESTS=0 the GPU tests (TESTS_K=EXPR selects), RUNS=0 the runs.
set -u
source benchmarks/device_env.sh
if [ "${PROBE:-1}" = 1 ]; then
  log probe; timeout 400 python3 benchmarks/logreg_probe.py --data-dir /tmp/mnist --json "$OUT/logreg_probe.json" > "$OUT/probe.log" 2>&1; tail -5 "$OUT/probe.log"
fi
if [ "${TESTS:-1}" = 1 ]; then
  log gpu-tests; timeout 300 python3 -m pytest -q -rA -m gpu ${TESTS_K:+-k "$TESTS_K"} tests > "$OUT/gpu-tests.log" 2>&1; grep -E "passed|failed|Error" "$OUT/gpu-tests.log" | tail -12 | tee -a "$OUT/summary.log"
fi
run() {  # name, extra arguments
  log "logreg $1"
  timeout 200 python3 -m mgpu_dask.run logreg --repeats 5 --quiet --json "/tmp/runs/logreg_$1.json" "${@:2}" 2>&1 | grep -E "accuracy|warm|evaluations" | tee -a "$OUT/summary.log"
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print({k: (round(v,4) if isinstance(v,float) else v) for k,v in r['fit_profile'].items()})" "/tmp/runs/logreg_$1.json" | tee -a "$OUT/summary.log"
}
if [ "${RUNS:-1}" = 1 ]; then
  for f in 1 4; do for w in ${WORKERS:-1 2 4}; do run "f${f}_w${w}" --workers $w --fraction $f; done; done
  tar czf "$OUT/runs.tgz" -C /tmp runs
fi
