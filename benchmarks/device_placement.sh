#!/usr/bin/env bash
# Placement benchmark (issue 23), one device call: RUNS fresh processes each of
# `knn --workers W --repeats 5` and `logreg --workers W` on MNIST, then one
# summary JSON per task (benchmarks/placement_summary.py).
# Usage on the device machine (repo root): RUNS=20 [TASKS="knn logreg"] bash benchmarks/device_placement.sh
set -u
source benchmarks/device_env.sh
W=$(nvidia-smi -L | wc -l); RUNS=${RUNS:-20}
for task in ${TASKS:-knn logreg}; do
  extra=""; [ $task = knn ] && extra="--repeats 5"
  log "placement: $RUNS fresh processes of $task --workers $W $extra"
  for i in $(seq 1 $RUNS); do
    timeout 120 python3 -m mgpu_dask.run $task --workers $W $extra --quiet --dashboard-address :0 --json /tmp/runs/place_${task}_$i.json > /tmp/runs/place_${task}_$i.log 2>&1 || echo "run $i failed: $(tail -1 /tmp/runs/place_${task}_$i.log)"
  done
  python3 benchmarks/placement_summary.py /tmp/runs/place_${task}_*.json --command "python -m mgpu_dask.run $task --workers $W $extra" --out "$OUT/placement_${task}.json" | tee -a "$OUT/summary.log"
done
