#!/usr/bin/env bash
# Calls of round 9 (2x H200): logistic regression with the holders' own exports and the
# device L-BFGS's iteration as one CUDA graph; KNN, cold start, deformed MNIST; with the
# RAPIDS parts (one per call, see benchmarks/device_env.sh) the framework tables.
# PHASE may list several phases; results under /tmp/runs, tarred into $OUT/runs.tgz.
#   lrtests  GPU tests of the logistic-regression paths (graph, levels, single host)
#   probe    benchmarks/logreg_device_probe.py: int8 and cublas, graph and op by op, 1/2 GPUs
#   setup    benchmarks/logreg_setup_probe.py (a holder's export, the leader's set-up,
#            first and later evaluations; cProfile); GPU tests one by one, their exit codes
#   logreg   logreg CLI at fractions 1 and 4 on 1 and 2 workers (WORKERS), default precision
#   knn      knn CLI at fractions 1 and 4 on 1 and 2 workers; three cold whole-process runs
#   deformed knn and logreg on mnist-deformed (COPIES, default 155: 8,137,500 rows), 1 and 2
#   gputests every GPU test (pytest -m gpu tests/)
#   table    (RAPIDS) --backend all for knn and logreg, 1 and 2 workers, fraction FRACTIONS
#   ucx      (RAPIDS) tcp vs ucx: shard-plan KNN and logreg on 2 workers
#   compare  (RAPIDS) deformed MNIST: ours against cuML's multi-GPU estimators, 2 workers
#   none     nothing (a call that only carries a RAPIDS part)
set -u
source benchmarks/device_env.sh
R=/tmp/runs
for phase in ${PHASE:-none}; do
case "$phase" in
lrtests)
  logreg_gpu_tests "graph or levels or single_host or lbfgs or shard_objective or int8" 300
  ;;
probe)
  log "device L-BFGS probe"
  timeout 240 python3 benchmarks/logreg_device_probe.py --data-dir /tmp/mnist --repeats 5 --json $R/device_probe${TAG:-}.json > "$R/device_probe${TAG:-}.log" 2>&1
  grep -E "^f|rror" "$R/device_probe${TAG:-}.log" | cut -c1-400 | tee -a "$OUT/summary.log"
  ;;
setup)
  log "set-up probe"
  timeout 120 python3 benchmarks/logreg_setup_probe.py --json $R/setup_probe${TAG:-}.json > "$R/setup_probe${TAG:-}.log" 2>&1
  head -1 "$R/setup_probe${TAG:-}.log" | tee -a "$OUT/summary.log"
  for t in graph_gives levels_made follows_the_host_loop without_a_client holders_levels; do
    timeout 120 python3 -m pytest -q -m gpu tests/test_gpu.py -k $t > "$R/gpu-test-$t.log" 2>&1
    log "gpu test $t: rc $? $(grep -E "passed|failed" "$R/gpu-test-$t.log" | tail -1)"
  done
  ;;
logreg)
  for f in ${FRACTIONS:-1 4}; do for w in ${WORKERS:-1 2}; do
    log "logreg f$f w$w"
    timeout 150 python3 -m mgpu_dask.run logreg --repeats ${REPEATS:-5} --quiet --workers $w --fraction $f --json $R/logreg_f${f}_w$w${TAG:-}.json 2>&1 | grep -E "accuracy|warm|rror" | tee -a "$OUT/summary.log"
    logreg_profile $R/logreg_f${f}_w$w${TAG:-}.json
  done; done
  ;;
knn)
  knn_runs w2_
  ;;
deformed)
  c=${COPIES:-155}
  for t in ${TASKS:-knn logreg}; do for w in 1 2; do
    log "$t mnist-deformed copies $c w$w"
    timeout 250 python3 -m mgpu_dask.run $t --dataset mnist-deformed --copies $c --workers $w --repeats ${REPEATS:-2} --quiet --json $R/deformed_${t}_c${c}_w$w.json 2>&1 | grep -E "accuracy|warm|generated|rror" | tee -a "$OUT/summary.log"
    [ $t = logreg ] && logreg_profile $R/deformed_${t}_c${c}_w$w.json
  done; done
  ;;
gputests)
  log "pytest -m gpu tests/"
  timeout 540 python3 -m pytest -q -rfEs -m gpu tests/ > "$R/gpu-tests-all.log" 2>&1
  grep -E "passed|failed|^FAILED|^ERROR" "$R/gpu-tests-all.log" | tail -20 | tee -a "$OUT/summary.log"
  ;;
table)
  python3 -c "import cuml; print('cuml', cuml.__version__)" 2>&1 | tail -1 | tee -a "$OUT/summary.log"
  for f in ${FRACTIONS:-1}; do for w in ${WORKERS:-1 2}; do for task in ${TASKS:-knn logreg}; do
    log "$task --backend ${BACKENDS:-all} f$f w$w"
    timeout 280 python3 -m mgpu_dask.run $task --backend ${BACKENDS:-all} --workers $w --fraction $f --repeats ${REPEATS:-3} --quiet --json $R/${task}_all_f${f}_w$w.json > "$R/${task}_all_f${f}_w$w.log" 2>&1
    grep -vE "^\[|^ *$" "$R/${task}_all_f${f}_w$w.log" | tail -16 | tee -a "$OUT/summary.log"
  done; done; done
  ;;
ucx)
  ucx_runs
  ;;
compare)
  COPIES=${COPIES:-155} T_KNN=200 T_LOGREG=200 bash benchmarks/device_deformed_compare.sh > /dev/null 2>&1
  cp -r "$OUT/compare" $R/ 2>/dev/null; tail -16 "$OUT/compare/summary.log" | tee -a "$OUT/summary.log"
  ;;
esac
done
tar czf "$OUT/runs.tgz" -C /tmp runs
