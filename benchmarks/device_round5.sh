#!/usr/bin/env bash
# The calls of one lease (2x H200), one PHASE each, while the RAPIDS parts
# travel one per call (see benchmarks/device_env.sh).  Results under /tmp/runs,
# tarred into $OUT/runs.tgz by every call.
#   tests    GPU tests of the device L-BFGS (run-ahead) and the single-host fit
#   logreg   logreg on 1/2 GPUs at fractions 1 and 4; the probe outside Dask
#   knn      knn on 1/2 GPUs at fractions 1 and 4; cold whole-process runs
#   panels   dashboard pages of a 2-GPU run (benchmarks/dashboard_panels.py; JOB, WAIT, TAG)
#   deformed the deformed-MNIST scaling workflows (copies 1/10/155, 1-2 GPUs)
#   table    (RAPIDS) cuml-single tests; --backend all for knn and logreg, 1 and 2 GPUs
#   ucx      (RAPIDS) tcp vs ucx: shard-plan KNN and logreg; deformed vs cuML (COMPARE=1)
#   lrtable  (RAPIDS) logreg --backend all on 1 GPU
#   none     nothing (a call that only carries a part)
set -u
source benchmarks/device_env.sh
R=/tmp/runs
case "${PHASE:-none}" in
tests)
  nvidia-smi -L | tee -a "$OUT/summary.log"
  python3 -c "import pynvml, bokeh, distributed; print('pynvml', pynvml.__file__, 'bokeh', bokeh.__version__, 'distributed', distributed.__version__)" | tee -a "$OUT/summary.log"
  log gpu-tests
  timeout 300 python3 -m pytest -q -rA -m gpu tests/test_gpu.py -k "lbfgs or single_host or shard_objective" > "$OUT/gpu-tests.log" 2>&1
  grep -E "passed|failed|Error" "$OUT/gpu-tests.log" | tail -12 | tee -a "$OUT/summary.log"
  timeout 200 python3 -m pytest -q -rA tests/test_backends.py -k "torch or one_worker or vote" > "$OUT/backend-tests.log" 2>&1
  tail -3 "$OUT/backend-tests.log" | tee -a "$OUT/summary.log"
  log probe
  timeout 200 python3 benchmarks/logreg_device_probe.py --data-dir /tmp/mnist --json $R/probe.json > "$OUT/probe.log" 2>&1
  grep -E "^f|Error" "$OUT/probe.log" | tee -a "$OUT/summary.log"
  ;;
logreg)
  for f in 1 4; do for w in ${WORKERS:-1 2}; do
    log "logreg f$f w$w"
    timeout 150 python3 -m mgpu_dask.run logreg --repeats 5 --quiet --workers $w --fraction $f --json $R/logreg_f${f}_w$w.json 2>&1 | grep -E "accuracy|warm|error" | tee -a "$OUT/summary.log"
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['warm_fit_predict_median'], {k: (round(v,4) if isinstance(v,float) else v) for k,v in r['fit_profile'].items()})" $R/logreg_f${f}_w$w.json | tee -a "$OUT/summary.log"
  done; done
  ;;
knn)
  knn_runs
  ;;
panels)
  timeout 200 python3 benchmarks/dashboard_panels.py capture --out $R/panels${TAG:-} --workers 2 --pages gpu,individual-gpu-memory,individual-gpu-utilization,status --wait ${WAIT:-10} --job "${JOB:-knn --fraction 4 --repeats 40 --quiet}" > "$OUT/panels.log" 2>&1
  tail -6 "$OUT/panels.log" | tee -a "$OUT/summary.log"
  ;;
deformed)
  for t in knn logreg; do
    wf=workflows/deformed-scaling.yaml; [ $t = logreg ] && wf=workflows/deformed-scaling-logreg.yaml
    sed 's/workers: \[1, 2, 4, 8\]/workers: [1, 2]/' $wf > /tmp/wf_$t.yaml
    log "workflow $t"
    timeout 280 python3 -m mgpu_dask.run workflow /tmp/wf_$t.yaml --json $R/deformed_$t.json > "$OUT/deformed_$t.log" 2>&1
    grep -E "^\[|accuracy|rror" "$OUT/deformed_$t.log" | tee -a "$OUT/summary.log"
  done
  ;;
table)
  python3 -c "import cuml; print('cuml', cuml.__version__)" 2>&1 | tail -1 | tee -a "$OUT/summary.log"
  timeout 200 python3 -m pytest -q -rA -m gpu tests/test_backends.py -k cuml_single > "$OUT/cuml-tests.log" 2>&1
  tail -3 "$OUT/cuml-tests.log" | tee -a "$OUT/summary.log"
  for w in 1 2; do for task in knn logreg; do
    log "$task --backend all w$w"
    timeout 240 python3 -m mgpu_dask.run $task --backend all --workers $w --repeats 3 --quiet --json $R/${task}_all_w$w.json 2>&1 | tail -9 | tee -a "$OUT/summary.log"
  done; done
  ;;
ucx)
  ucx_runs
  if [ "${COMPARE:-1}" = 1 ]; then
    COPIES=155 T_KNN=200 T_LOGREG=200 bash benchmarks/device_deformed_compare.sh > /dev/null 2>&1
    cp -r "$OUT/compare" $R/ 2>/dev/null; tail -16 "$OUT/compare/summary.log" | tee -a "$OUT/summary.log"
  fi
  ;;
lrtable)
  log "logreg --backend all w1"
  timeout 240 python3 -m mgpu_dask.run logreg --backend all --workers 1 --repeats 2 --quiet --json $R/logreg_all_w1_b.json 2>&1 | tail -9 | tee -a "$OUT/summary.log"
  ;;
esac
tar czf "$OUT/runs.tgz" -C /tmp runs
