#!/usr/bin/env bash
# KNN at the hardware limit, one device call (any kind; set STAGE):
#   STAGE=check   GPU tests of the kernels, the single-GPU kernel benchmark
#                 (every precision, PyTorch beside it, scikit-learn check) at
#                 fractions 1 and 4, one CLI run
#   STAGE=runs    CLI runs: warm predict on 1 and W GPUs at fractions 1 and 4
#                 for each of PRECISIONS (default: auto); cold whole-process
#                 time (second run on the machine) on W GPUs
#   STAGE=all     both
# Usage on the device machine (repo root): STAGE=check bash benchmarks/device_knn_hw.sh
set -u
source benchmarks/device_env.sh
W=$(nvidia-smi -L | wc -l)
STAGE=${STAGE:-check}
if [ "$STAGE" = check ] || [ "$STAGE" = all ]; then
  log gpu-tests; timeout 400 python3 -m pytest -q -x -m gpu tests/test_gpu.py > "$OUT/gpu-tests.log" 2>&1; tail -3 "$OUT/gpu-tests.log" | tee -a "$OUT/summary.log"
  for f in 1 4; do
    log "kernels fraction $f"; timeout 400 python3 benchmarks/knn_kernels.py --data-dir /tmp/mnist --fraction $f --json "$OUT/kernels_f$f.json" > "$OUT/kernels_f$f.log" 2>&1; grep -E "^(int8|bf16|tf32|fp32|torch) " "$OUT/kernels_f$f.log" | tee -a "$OUT/summary.log"
  done
fi
if [ "$STAGE" = runs ] || [ "$STAGE" = all ]; then
  for f in 1 4; do for w in 1 $W; do for p in ${PRECISIONS:-auto}; do
    log "knn fraction $f workers $w precision $p"
    timeout 300 python3 -m mgpu_dask.run knn --workers $w --fraction $f --precision $p --quiet --dashboard-address :0 --json "/tmp/runs/knn_f${f}_w${w}_$p.json" 2>&1 | grep -E "warm predict|accuracy|warning|error" | tee -a "$OUT/summary.log"
  done; done; done
  for i in 1 2; do
    log "cold whole process $i, $W workers"
    s=$(date +%s%N); timeout 120 python3 -m mgpu_dask.run knn --workers $W --quiet --dashboard-address :0 --json "/tmp/runs/knn_cold_$i.json" > /dev/null 2>&1
    echo "process wall (python start to exit): $(( ($(date +%s%N) - s) / 1000000 )) ms" | tee -a "$OUT/summary.log"
  done
  tar czf "$OUT/knn_runs.tgz" -C /tmp/runs $(cd /tmp/runs && ls knn_*.json)
fi
