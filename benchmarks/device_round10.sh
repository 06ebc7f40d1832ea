#!/usr/bin/env bash
# Calls of round 10 (one H200 or H100 while no several-GPU machine is lent): logistic
# regression on uint8 rows (--dtype uint8, the estimator's input_scale) against float32
# copies in the same lease, the cold-start timeline, GPU tests.
# PHASE may list several phases; results under /tmp/runs, tarred into $OUT/runs.tgz.
#   lrtests  GPU tests of the logistic-regression paths (uint8 rows, levels, single host)
#   logreg   logreg CLI at fractions 1 and 4 on 1 worker, --dtype uint8 then float32
#   deformed logreg (and knn with TASKS) on mnist-deformed (COPIES, default 155), 1 worker,
#            --dtype uint8 then float32
#   cold     benchmarks/cold_timeline.py (knn, WORKERS workers) after one warm-up run, then
#            three whole-process `knn --workers WORKERS` runs
#   levels   benchmarks/int8_levels_probe.py (uint8 / float32 rows to int8 levels, transpose)
#   table    (RAPIDS) --backend BACKENDS (all) for TASKS at FRACTIONS on W workers
#   evalprobe benchmarks/logreg_eval_probe.py, METHODS (int8,int8-wide) at ROWS
#   overhead benchmarks/predict_overhead_probe.py at FRACTIONS on W workers
#   none     nothing (a call that only carries a RAPIDS part)
#   startprobe benchmarks/cluster_start_probe.py (what connect() waits for, sampled)
#   imports  python -X importtime of the client's modules and of the fork server's
#   gputests every GPU test (pytest -m gpu tests/)
set -u
source benchmarks/device_env.sh
R=/tmp/runs
W=${WORKERS:-1}
for phase in ${PHASE:-none}; do
case "$phase" in
lrtests)
  logreg_gpu_tests "uint8 or levels or single_host or shard_objective or int8 or graph or without_a_client or softmax" 400
  ;;
logreg)
  for f in ${FRACTIONS:-1 4}; do for t in ${DTYPES:-uint8 float32}; do
    log "logreg f$f w$W --dtype $t"
    timeout 150 python3 -m mgpu_dask.run logreg --repeats ${REPEATS:-5} --quiet --workers $W --fraction $f --dtype $t --json $R/logreg_f${f}_w${W}_$t${TAG:-}.json 2>&1 | grep -E "accuracy|warm|rror" | tee -a "$OUT/summary.log"
    logreg_profile $R/logreg_f${f}_w${W}_$t${TAG:-}.json
  done; done
  ;;
deformed)
  c=${COPIES:-155}
  for task in ${TASKS:-logreg}; do for t in ${DTYPES:-uint8 float32}; do
    log "$task mnist-deformed copies $c w$W --dtype $t"
    timeout 250 python3 -m mgpu_dask.run $task --dataset mnist-deformed --copies $c --workers $W --dtype $t --repeats ${REPEATS:-3} --quiet --json $R/deformed_${task}_c${c}_w${W}_$t${TAG:-}.json 2>&1 | grep -E "accuracy|warm|generated|rror" | tee -a "$OUT/summary.log"
    [ $task = logreg ] && logreg_profile $R/deformed_${task}_c${c}_w${W}_$t${TAG:-}.json
  done; done
  ;;
cold)
  python3 -m mgpu_dask.run knn --workers $W --quiet > /dev/null 2>&1  # fills Numba's cache
  for i in 1 2; do
    log "cold timeline knn --workers $W ($i)"
    python3 benchmarks/cold_timeline.py --workers $W --quiet > $R/cold_timeline_w$W${TAG:-}_$i.log 2>&1
    python3 -c "
import json, re, sys
text = open(sys.argv[1]).read()
marks = json.loads(text[text.index('{\n'):text.index('\n}') + 2])
print({k: v for k, v in marks.items()})" $R/cold_timeline_w$W${TAG:-}_$i.log 2>&1 | cut -c1-1500 | tee -a "$OUT/summary.log"
    grep -E "^cold:" $R/cold_timeline_w$W${TAG:-}_$i.log | tee -a "$OUT/summary.log"
  done
  for i in 1 2 3; do
    s=$(date +%s%N)
    python3 -m mgpu_dask.run knn --workers $W --quiet --json $R/knn_cold_w$W${TAG:-}_$i.json > /dev/null 2>&1
    log "cold whole process knn --workers $W: rc $? $(( ($(date +%s%N) - s) / 1000000 )) ms"
  done
  ;;
levels)
  log "int8 levels probe"
  timeout 200 python3 benchmarks/int8_levels_probe.py --rows ${ROWS:-1000000,4000000} --json $R/levels_probe${TAG:-}.json 2>&1 | cut -c1-600 | tee -a "$OUT/summary.log"
  ;;
imports)
  log "client imports (python -X importtime: mgpu_dask.run, then mgpu_dask.jobs), slowest cumulative"
  python3 -X importtime -c "import mgpu_dask.run; import mgpu_dask.jobs" 2> $R/importtime_client${TAG:-}.log
  sort -t'|' -k2 -n $R/importtime_client${TAG:-}.log | tail -40 | tee -a "$OUT/summary.log"
  log "worker imports (mgpu_dask.worker_imports)"
  python3 -X importtime -c "import mgpu_dask.worker_imports as w; print({k: round(v, 3) for k, v in w.seconds.items()})" 2> $R/importtime_worker${TAG:-}.log | tee -a "$OUT/summary.log"
  sort -t'|' -k2 -n $R/importtime_worker${TAG:-}.log | tail -30 | tee -a "$OUT/summary.log"
  ;;
table)
  python3 -c "import cuml, cuvs; print('cuml', cuml.__version__, 'cuvs', cuvs.__version__)" 2>&1 | tail -1 | tee -a "$OUT/summary.log"
  for f in ${FRACTIONS:-1}; do for task in ${TASKS:-knn logreg}; do
    log "$task --backend ${BACKENDS:-all} f$f w$W"
    timeout ${T_TABLE:-280} python3 -m mgpu_dask.run $task --backend ${BACKENDS:-all} --workers $W --fraction $f --repeats ${REPEATS:-3} --quiet --json $R/${task}_all_f${f}_w$W${TAG:-}.json > "$R/${task}_all_f${f}_w$W${TAG:-}.log" 2>&1
    grep -vE "^\[|^ *$" "$R/${task}_all_f${f}_w$W${TAG:-}.log" | tail -16 | tee -a "$OUT/summary.log"
  done; done
  ;;
evalprobe)
  log "logreg evaluation probe (int8 with the local-array softmax against the wide one)"
  timeout 240 python3 benchmarks/logreg_eval_probe.py --json $R/eval_probe${TAG:-}.json --methods ${METHODS:-int8,int8-wide} --rows ${ROWS:-52500,210000,4068750} > "$R/eval_probe${TAG:-}.log" 2>&1
  tail -3 "$R/eval_probe${TAG:-}.log" | cut -c1-900 | tee -a "$OUT/summary.log"
  ;;
overhead)
  for f in ${FRACTIONS:-1 4}; do
    log "predict overhead probe, fraction $f, $W worker(s)"
    timeout 200 python3 benchmarks/predict_overhead_probe.py --workers $W --fraction $f --repeats ${REPEATS:-20} --data-dir /tmp/mnist --json $R/overhead_f${f}_w$W${TAG:-}.json 2>&1 | grep -E "^knn|^logreg|rror" | tee -a "$OUT/summary.log"
  done
  ;;
none)
  ;;
startprobe)
  log "cluster start probe (--workers $W)"
  timeout 120 python3 benchmarks/cluster_start_probe.py --workers $W > $R/cluster_start_w$W${TAG:-}.log 2>&1
  grep -vE "threading.py|selectors.py|base_events.py|runners.py|queue.py" $R/cluster_start_w$W${TAG:-}.log | head -60 | cut -c1-200 | tee -a "$OUT/summary.log"
  ;;
gputests)
  all_gpu_tests
  ;;
esac
done
tar czf "$OUT/runs.tgz" -C /tmp runs
