#!/usr/bin/env bash
# One-GPU calls of round 7 (one H200): the cuda-c backend (our algorithms as CUDA C
# kernels through CuPy's RawModule) beside the others, and logistic regression's
# one-stage predict.  Results under /tmp/runs, tarred into $OUT/runs.tgz.
#   cudac    GPU tests of the CUDA C kernels and backend; knn and logreg
#            --backend all on one GPU (fraction 1)
#   logreg   logreg CLI at fractions 1 and 4, --precision fp32 and bf16 (TAG names files)
#   table    --backend all for knn and logreg at fraction FRACTION (default 4)
set -u
source benchmarks/device_env.sh
R=/tmp/runs
logreg_runs() {
  for f in 1 4; do for p in ${PRECISIONS:-fp32 bf16}; do
    log "logreg f$f w1 --precision $p"
    timeout 150 python3 -m mgpu_dask.run logreg --repeats 5 --quiet --workers 1 --fraction $f --precision $p --json $R/logreg_f${f}_$p${TAG:-}.json 2>&1 | grep -E "accuracy|warm|products|rror" | tee -a "$OUT/summary.log"
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['warm_fit_predict_median'], r['warm'], {k: (round(v,4) if isinstance(v,float) else v) for k,v in r['fit_profile'].items()})" $R/logreg_f${f}_$p${TAG:-}.json | tee -a "$OUT/summary.log"
  done; done
}
table() {  # task fraction
  log "$1 --backend all f$2 w1"
  timeout 280 python3 -m mgpu_dask.run $1 --backend all --repeats 5 --workers 1 --fraction $2 --json $R/$1_all_f$2_w1.json > "$OUT/$1_all_f$2.log" 2>&1
  grep -vE "^\[|^ *$" "$OUT/$1_all_f$2.log" | tail -14 | tee -a "$OUT/summary.log"
}
case "${PHASE:-none}" in
cudac)
  nvidia-smi -L | tee -a "$OUT/summary.log"
  log gpu-tests
  timeout 200 python3 -m pytest -q -rA -m gpu tests/test_gpu.py tests/test_backends.py -k "cuda_c or single_host or without_a_client" > "$OUT/gpu-tests.log" 2>&1
  grep -E "passed|failed|Error|error" "$OUT/gpu-tests.log" | tail -14 | tee -a "$OUT/summary.log"
  table knn 1
  table logreg 1
  ;;
logreg)
  logreg_runs
  ;;
table)
  table knn ${FRACTION:-4}
  table logreg ${FRACTION:-4}
  ;;
esac
tar czf "$OUT/runs.tgz" -C /tmp runs
