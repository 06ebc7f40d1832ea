#!/usr/bin/env bash
# One device call for the device-resident L-BFGS: GPU tests of logistic
# regression, the bare-process probe (benchmarks/logreg_device_probe.py), then
# the logreg job on 1 and 2 GPUs at fractions 1 and 4 (device optimizer; host
# optimizer for comparison), and with DEFORMED=1 the deformed-MNIST workload
# on 1 and 2 GPUs.  TESTS=0 / PROBE=0 / RUNS=0 skip parts.
set -u
source benchmarks/device_env.sh
if [ "${TESTS:-1}" = 1 ]; then
  log gpu-tests; timeout 240 python3 -m pytest -q -rA -m gpu tests/test_gpu.py -k "${TESTS_K:-lbfgs or single_host or shard_objective or sklearn_api}" > "$OUT/gpu-tests.log" 2>&1; grep -E "passed|failed|Error" "$OUT/gpu-tests.log" | tail -12 | tee -a "$OUT/summary.log"
fi
if [ "${PROBE:-1}" = 1 ]; then
  log probe; timeout 200 python3 benchmarks/logreg_device_probe.py --data-dir /tmp/mnist --json "$OUT/probe.json" > "$OUT/probe.log" 2>&1; grep -E "^f|Error" "$OUT/probe.log" | tee -a "$OUT/summary.log"
fi
run() {  # name, extra arguments
  log "logreg $1"
  timeout 150 python3 -m mgpu_dask.run logreg --repeats 5 --quiet --json "/tmp/runs/logreg_$1.json" "${@:2}" 2>&1 | grep -E "accuracy|warm|model|error" | tee -a "$OUT/summary.log"
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print({k: (round(v,4) if isinstance(v,float) else v) for k,v in r['fit_profile'].items()})" "/tmp/runs/logreg_$1.json" | tee -a "$OUT/summary.log"
}
if [ "${RUNS:-1}" = 1 ]; then
  for f in 1 4; do for w in 1 2; do run "f${f}_w${w}" --workers $w --fraction $f; done; done
  run f1_w1_host --workers 1 --optimizer host
fi
if [ "${DEFORMED:-0}" = 1 ]; then
  for w in 1 2; do run "deformed_w$w" --workers $w --dataset mnist-deformed --copies ${COPIES:-155} --repeats 2; done
fi
tar czf "$OUT/runs.tgz" -C /tmp runs
