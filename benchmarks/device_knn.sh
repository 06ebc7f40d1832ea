#!/usr/bin/env bash
# One device call: GPU stack, info, 4 CuPy shards, GPU tests, kernel benchmark,
# CLI runs on 1/2/4 GPUs at fractions 1 and 4, plan (b) under a capped budget.
# Usage on the device machine (repo root):  bash benchmarks/device_knn.sh
set -u
source benchmarks/device_env.sh
log info; python3 -m mgpu_dask.run info 2>&1 | tee -a "$OUT/summary.log"
log shards; python3 -m mgpu_dask.run data --shard --workers 4 2>&1 | tee -a "$OUT/summary.log"
log gpu-tests; timeout 300 python3 -m pytest -q -rA -m gpu tests > "$OUT/gpu-tests.log" 2>&1; grep -E "AFTER_|passed|failed|Error" "$OUT/gpu-tests.log" | tail -12 | tee -a "$OUT/summary.log"
[ -n "${KERNELS:-}" ] && log kernels && timeout 240 python3 benchmarks/knn_kernels.py --data-dir .mnist --json "$OUT/knn_kernels.json" > "$OUT/kernels.log" 2>&1; tail -30 "$OUT/kernels.log"
for f in 1 4; do for w in 1 2 4; do
  log "knn fraction $f workers $w"
  s=$(date +%s%N)
  timeout 300 python3 -m mgpu_dask.run knn --workers $w --fraction $f --quiet --json "/tmp/runs/knn_f${f}_w${w}.json" 2>&1 | tail -4 | tee -a "$OUT/summary.log"
  echo "process wall (python start to exit): $(( ($(date +%s%N) - s) / 1000000 )) ms" | tee -a "$OUT/summary.log"
done; done
log "direct method, fraction 1, 4 workers"
timeout 300 python3 -m mgpu_dask.run knn --workers 4 --method direct --quiet --json /tmp/runs/knn_direct_f1_w4.json 2>&1 | tail -3 | tee -a "$OUT/summary.log"
log "plan shard at fraction 4 (660 MB float32 train), budget 400MB, 4 workers"
timeout 300 python3 -m mgpu_dask.run knn --workers 4 --fraction 4 --memory-budget 400MB --quiet --json /tmp/runs/knn_shard_f4_w4.json 2>&1 | tail -5 | tee -a "$OUT/summary.log"
tar czf "$OUT/runs.tgz" -C /tmp runs
