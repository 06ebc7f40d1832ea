#!/usr/bin/env bash
# One-GPU calls of round 8 (one H200): logistic regression on int8 tensor cores
# (``--precision int8``: rows of 8-bit levels read at one byte per value, exact
# int32 sums).  Results under /tmp/runs, tarred into $OUT/runs.tgz.
#   int8     GPU tests of the evaluations; benchmarks/logreg_eval_probe.py (fp32, bf16,
#            int8 with row blocks of 4,096 / 16,384 / 65,536); logreg CLI at fractions
#            1 and 4, --precision fp32, int8, bf16
#   gemm     benchmarks/int8_gemm_probe.py (both orientations of the int8 products), the
#            evaluation probe (METHODS, TAG), logreg CLI (PRECISIONS, default int8)
#   spread   the evaluation probe's repeated evaluations; repeated fits in one process
#            (benchmarks/logreg_spread_probe.py); GPU tests of the evaluations
#   deformed logreg on mnist-deformed (COPIES, default 155: 8,137,500 rows), one GPU,
#            --precision int8 (and PRECISIONS)
#   gputests every GPU test (pytest -m gpu tests/)
#   logreg   logreg CLI at fractions 1 and 4, --precision PRECISIONS_CLI (auto fp32)
#   none     nothing (a call that only carries a RAPIDS part)
#   table    --backend all for logreg at fractions 1 and 4 (--precision auto on ours)
set -u
source benchmarks/device_env.sh
R=/tmp/runs
for phase in ${PHASE:-none}; do  # several phases: PHASE="deformed gputests"
case "$phase" in
int8)
  nvidia-smi -L | tee -a "$OUT/summary.log"
  log "gpu tests of the evaluations"
  timeout 200 python3 -m pytest -q -rfE -m gpu tests/test_gpu.py -k "shard_objective or tensor_cores or lbfgs or single_host" > "$R/gpu-tests-eval.log" 2>&1
  grep -E "passed|failed|^FAILED|^ERROR" "$R/gpu-tests-eval.log" | tail -14 | tee -a "$OUT/summary.log"
  log "evaluation probe"
  timeout 200 python3 benchmarks/logreg_eval_probe.py --json $R/eval_probe.json --methods ${METHODS:-cublas,bf16,int8:4096,int8:16384,int8:65536} > "$R/eval_probe.log" 2>&1
  tail -4 "$R/eval_probe.log" | cut -c1-900 | tee -a "$OUT/summary.log"
  PRECISIONS=${PRECISIONS:-fp32 int8 bf16} logreg_runs
  ;;
gemm)
  log "int8 product probe"
  timeout 200 python3 benchmarks/int8_gemm_probe.py --json $R/int8_gemm_probe.json > "$R/int8_gemm_probe.log" 2>&1
  tail -3 "$R/int8_gemm_probe.log" | cut -c1-1200 | tee -a "$OUT/summary.log"
  log "evaluation probe"
  timeout 200 python3 benchmarks/logreg_eval_probe.py --json $R/eval_probe${TAG:-}.json --methods ${METHODS:-cublas,bf16,int8:16384,int8:65536} > "$R/eval_probe${TAG:-}.log" 2>&1
  tail -4 "$R/eval_probe${TAG:-}.log" | cut -c1-1200 | tee -a "$OUT/summary.log"
  PRECISIONS=${PRECISIONS:-int8} logreg_runs
  ;;
spread)
  log "evaluation probe, repeated evaluations"
  timeout 200 python3 benchmarks/logreg_eval_probe.py --json $R/eval_probe_spread${TAG:-}.json --rows ${ROWS:-52500,4068750} --methods cublas,bf16,int8 > "$R/eval_probe_spread${TAG:-}.log" 2>&1
  tail -2 "$R/eval_probe_spread${TAG:-}.log" | cut -c1-1500 | tee -a "$OUT/summary.log"
  log "repeated fits"
  timeout 200 python3 benchmarks/logreg_spread_probe.py --json $R/spread${TAG:-}.json > "$R/spread${TAG:-}.log" 2>&1
  tail -4 "$R/spread${TAG:-}.log" | cut -c1-1500 | tee -a "$OUT/summary.log"
  log "gpu tests of the evaluations"
  timeout 200 python3 -m pytest -q -rfE -m gpu tests/test_gpu.py -k "shard_objective or tensor_cores or lbfgs or single_host or int8" > "$R/gpu-tests-eval.log" 2>&1
  grep -E "passed|failed|^FAILED|^ERROR|^E " "$R/gpu-tests-eval.log" | tail -14 | tee -a "$OUT/summary.log"
  ;;
deformed)
  c=${COPIES:-155}
  for p in ${PRECISIONS:-int8}; do
    log "logreg mnist-deformed copies $c w1 --precision $p"
    timeout 250 python3 -m mgpu_dask.run logreg --dataset mnist-deformed --copies $c --workers 1 --repeats 2 --quiet --precision $p --json $R/deformed_logreg_c${c}_w1_$p.json 2>&1 | grep -E "accuracy|warm|model|rror" | tee -a "$OUT/summary.log"
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['warm_fit_predict_median'], r['loss'], {k: (round(v,4) if isinstance(v,float) else v) for k,v in r['fit_profile'].items()})" $R/deformed_logreg_c${c}_w1_$p.json | tee -a "$OUT/summary.log"
  done
  ;;
gputests)
  log "pytest -m gpu tests/"
  timeout 540 python3 -m pytest -q -rfEs -m gpu tests/ > "$R/gpu-tests-all.log" 2>&1
  grep -E "passed|failed|^FAILED|^ERROR" "$R/gpu-tests-all.log" | tail -20 | tee -a "$OUT/summary.log"
  ;;
table)
  for f in ${FRACTIONS:-1 4}; do backend_table logreg $f --precision ${PRECISION:-auto}; done
  ;;
logreg)
  PRECISIONS=${PRECISIONS_CLI:-auto fp32} logreg_runs
  ;;
esac
done
tar czf "$OUT/runs.tgz" -C /tmp runs
