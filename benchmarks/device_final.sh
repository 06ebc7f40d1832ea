#!/usr/bin/env bash
# The last device calls of a round, in two stages (each within one call's limit):
#   STAGE=a  device_logreg.sh without its probe (every GPU test; runs at 1/2/4
#            GPUs x fractions 1 and 4, JSON with fit profiles); a cProfile of
#            the fitting worker.
#   STAGE=b  the bench sweep's logistic-regression rows for our backend
#            (--append to the committed 4x H200 results); the evaluation probe.
set -u
source benchmarks/device_env.sh >/dev/null
if [ "${STAGE:-a}" = a ]; then
  PROBE=0 bash benchmarks/device_logreg.sh  # every GPU test, the runs (runs.tgz)
  log leader-profile; timeout 90 python3 benchmarks/logreg_leader_profile.py --workers 4 --top 25 > "$OUT/leader_profile.log" 2>&1; head -3 "$OUT/leader_profile.log" | tee -a "$OUT/summary.log"
else
  rm -rf /tmp/bench && cp -r benchmarks/results/bench-4xH200 /tmp/bench
  log bench-logreg; timeout 300 python3 -m mgpu_dask.run bench --tasks logreg --workers-list 1,2,4 --fractions 0.25,1,4 --backends numba --repeats 2 --quiet --append --out /tmp/bench > /tmp/bench/logreg4.log 2>&1; echo rc=$?; grep -E "^logreg +numba" /tmp/bench/logreg4.log | tee -a "$OUT/summary.log"
  cp -r /tmp/bench "$OUT/bench"
  log probe; timeout 200 python3 benchmarks/logreg_probe.py --data-dir /tmp/mnist --workers 0 --json "$OUT/logreg_probe.json" > "$OUT/probe.log" 2>&1; tail -3 "$OUT/probe.log"
fi
