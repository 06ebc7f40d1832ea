#!/usr/bin/env bash
# Calls of round 11 (one H200 while no several-GPU machine is lent): labels that live
# beside their rows, against the previous commit's labels sent with every fit, in the
# same lease. PHASE may list several phases; results under /tmp/runs, tarred into
# $OUT/runs.tgz.
#   ab       logreg CLI, the code at OLD_REF (carried as .ab/old/mgpu_dask, made by
#            `git archive`) and the working tree's, alternating ROUNDS times: deformed
#            MNIST (COPIES, default 155) and MNIST (SETS: "deformed mnist"), W workers,
#            --dtype uint8 (ORDER: "old new")
#   probe    benchmarks/labels_probe.py: both ways in one cluster, alternating, at FRACTIONS
#   lrtests  GPU tests of the logistic-regression paths, the labels' included
#   gputests every GPU test (pytest -m gpu tests/)
set -u
source benchmarks/device_env.sh
R=/tmp/runs
W=${WORKERS:-1}
for phase in ${PHASE:-none}; do
case "$phase" in
ab)
  c=${COPIES:-155}
  for i in $(seq ${ROUNDS:-2}); do for code in ${ORDER:-old new}; do
    path=$PYTHONPATH; [ $code = old ] && path=$PWD/.ab/old:$PYTHONPATH
    if [[ " ${SETS:-deformed mnist} " == *" deformed "* ]]; then
    log "logreg mnist-deformed copies $c w$W, $code code (round $i)"
    PYTHONPATH=$path timeout 250 python3 -m mgpu_dask.run logreg --dataset mnist-deformed --copies $c --workers $W --repeats ${REPEATS:-3} --quiet --json $R/deformed_logreg_w${W}_${code}_$i.json 2>&1 | grep -E "accuracy|warm|rror" | tee -a "$OUT/summary.log"
    logreg_profile $R/deformed_logreg_w${W}_${code}_$i.json
    fi
    [[ " ${SETS:-deformed mnist} " == *" mnist "* ]] || continue
    log "logreg mnist w$W, $code code (round $i)"
    PYTHONPATH=$path timeout 150 python3 -m mgpu_dask.run logreg --workers $W --repeats ${MREPEATS:-5} --quiet --json $R/logreg_f1_w${W}_${code}_$i.json 2>&1 | grep -E "accuracy|warm|rror" | tee -a "$OUT/summary.log"
    logreg_profile $R/logreg_f1_w${W}_${code}_$i.json
  done; done
  ;;
probe)
  for f in ${FRACTIONS:-1}; do
    log "labels probe, fraction $f, $W worker(s)"
    timeout 200 python3 benchmarks/labels_probe.py --workers $W --fraction $f --repeats ${REPEATS:-15} --data-dir /tmp/mnist --json $R/labels_probe_f${f}_w$W${TAG:-}.json 2>&1 | grep -E "^labels|rror" | cut -c1-900 | tee -a "$OUT/summary.log"
  done
  ;;
lrtests)
  logreg_gpu_tests "labels or uint8 or levels or single_host or shard_objective or int8 or graph or without_a_client or softmax" 400
  ;;
gputests)
  all_gpu_tests
  ;;
esac
done
tar czf "$OUT/runs.tgz" -C /tmp runs
