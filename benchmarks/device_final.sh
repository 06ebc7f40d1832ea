#!/usr/bin/env bash
# The last device calls of a round, in two stages (each within one call's limit):
#   STAGE=a  every GPU test; logistic regression runs at 1/2/4 GPUs x fractions
#            1 and 4 (JSON with fit profiles); a cProfile of the fitting worker.
#   STAGE=b  the bench sweep's logistic-regression rows for our backend
#            (--append to the committed 4x H200 results); the evaluation probe.
set -u
source benchmarks/device_env.sh >/dev/null
if [ "${STAGE:-a}" = a ]; then
  log gpu-tests; timeout 300 python3 -m pytest -q -rA -m gpu tests > "$OUT/gpu-tests.log" 2>&1; grep -E "passed|failed|rror" "$OUT/gpu-tests.log" | tail -6 | tee -a "$OUT/summary.log"
  for r in "1 1" "1 2" "1 4" "4 1" "4 2" "4 4"; do set -- $r
    log "logreg f$1 w$2"; timeout 60 python3 -m mgpu_dask.run logreg --workers $2 --fraction $1 --repeats 5 --quiet --json /tmp/runs/logreg_f$1_w$2.json 2>&1 | grep -E "accuracy|warm|evaluations" | tee -a "$OUT/summary.log"
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print({k: (round(v,4) if isinstance(v,float) else v) for k,v in r['fit_profile'].items()})" /tmp/runs/logreg_f$1_w$2.json | tee -a "$OUT/summary.log"
  done
  cp /tmp/runs/*.json "$OUT/"
  log leader-profile; timeout 90 python3 benchmarks/logreg_leader_profile.py --workers 4 --top 25 > "$OUT/leader_profile.log" 2>&1; head -3 "$OUT/leader_profile.log" | tee -a "$OUT/summary.log"
else
  rm -rf /tmp/bench && cp -r benchmarks/results/bench-4xH200 /tmp/bench
  log bench-logreg; timeout 300 python3 -m mgpu_dask.run bench --tasks logreg --workers-list 1,2,4 --fractions 0.25,1,4 --backends numba --repeats 2 --quiet --append --out /tmp/bench > /tmp/bench/logreg4.log 2>&1; echo rc=$?; grep -E "^logreg +numba" /tmp/bench/logreg4.log | tee -a "$OUT/summary.log"
  cp -r /tmp/bench "$OUT/bench"
  log probe; timeout 200 python3 benchmarks/logreg_probe.py --data-dir /tmp/mnist --workers 0 --json "$OUT/logreg_probe.json" > "$OUT/probe.log" 2>&1; tail -3 "$OUT/probe.log"
fi
