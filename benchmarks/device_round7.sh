#!/usr/bin/env bash
# One-GPU calls of round 7 (one H200): the cuda-c backend (our algorithms as CUDA C
# kernels through CuPy's RawModule) beside the others, and logistic regression's
# one-stage predict.  Results under /tmp/runs, tarred into $OUT/runs.tgz.
#   cudac    GPU tests of the CUDA C kernels and backend; knn and logreg
#            --backend all on one GPU (fraction 1)
#   logreg   logreg CLI at fractions 1 and 4, --precision fp32 and bf16 (TAG names files)
#   table    --backend all for knn and logreg at fraction FRACTION (default 4)
#   tiles    benchmarks/knn_tiles_probe.py at fractions 4 and 1 (our tile shapes, cuda-c's)
#   deformed mnist-deformed (COPIES, default 155: 8,137,500 rows) on one GPU: knn, and
#            logreg --precision fp32 and bf16
#   gputests every GPU test (pytest -m gpu tests/)
#   knn      knn CLI on one GPU at fractions 1 and 4 (--repeats 10), then PHASE=cold's runs
#   cold     whole-process knn --workers WORKERS (default: the GPUs present), four runs
#            (the first fills the kernel cache), then logreg_runs with TAG
set -u
source benchmarks/device_env.sh
R=/tmp/runs
case "${PHASE:-none}" in
cudac)
  nvidia-smi -L | tee -a "$OUT/summary.log"
  log gpu-tests
  timeout 200 python3 -m pytest -q -rA -m gpu tests/test_gpu.py tests/test_backends.py -k "cuda_c or single_host or without_a_client or torch" > "$R/gpu-tests.log" 2>&1
  grep -E "passed|failed|Error|error" "$R/gpu-tests.log" | tail -14 | tee -a "$OUT/summary.log"
  backend_table knn 1
  backend_table logreg 1
  ;;
deformed)
  c=${COPIES:-155}
  log "knn mnist-deformed copies $c w1"
  timeout 200 python3 -m mgpu_dask.run knn --dataset mnist-deformed --copies $c --workers 1 --repeats 3 --quiet --json $R/deformed_knn_c${c}_w1.json 2>&1 | grep -E "accuracy|warm|deformed|rror" | tee -a "$OUT/summary.log"
  for p in fp32 bf16; do
    log "logreg mnist-deformed copies $c w1 --precision $p"
    timeout 200 python3 -m mgpu_dask.run logreg --dataset mnist-deformed --copies $c --workers 1 --repeats 2 --quiet --precision $p --json $R/deformed_logreg_c${c}_w1_$p.json 2>&1 | grep -E "accuracy|warm|model|rror" | tee -a "$OUT/summary.log"
  done
  ;;
gputests)
  log "pytest -m gpu tests/"
  timeout 540 python3 -m pytest -q -rfEs -m gpu tests/ > "$R/gpu-tests-all.log" 2>&1
  grep -E "passed|failed|^FAILED|^ERROR" "$R/gpu-tests-all.log" | tail -20 | tee -a "$OUT/summary.log"
  ;;
logreg)
  logreg_runs
  ;;
table)
  backend_table knn ${FRACTION:-4}
  backend_table logreg ${FRACTION:-4}
  ;;
tiles)
  for f in 4 1; do
    log "tiles probe f$f"
    timeout 250 python3 benchmarks/knn_tiles_probe.py --data-dir /tmp/mnist --fraction $f --json $R/tiles_f$f.json 2>&1 | tee -a "$OUT/summary.log" | tail -3
  done
  ;;
knn)
  for f in 1 4; do
    log "knn f$f w1"
    timeout 150 python3 -m mgpu_dask.run knn --repeats 10 --quiet --workers 1 --fraction $f --json $R/knn_f${f}_w1.json 2>&1 | grep -E "accuracy|warm|rror" | tee -a "$OUT/summary.log"
  done
  PRECISIONS=${PRECISIONS:-none}
  ;&
cold)
  w=${WORKERS:-$(nvidia-smi -L | wc -l)}
  for i in 0 1 2 3; do
    s=$(date +%s%N)
    python3 -m mgpu_dask.run knn --workers $w --quiet --json $R/knn_cold_w${w}_$i.json > /dev/null 2>&1
    log "cold whole process knn --workers $w (run $i): rc $? $(( ($(date +%s%N) - s) / 1000000 )) ms"
  done
  [ "${PRECISIONS:-}" = none ] || logreg_runs
  ;;
esac
tar czf "$OUT/runs.tgz" -C /tmp runs
