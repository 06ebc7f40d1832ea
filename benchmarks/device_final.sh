set -u
source benchmarks/device_env.sh >/dev/null
rm -rf /tmp/bench && cp -r benchmarks/results/bench-4xH200 /tmp/bench
log bench-logreg; timeout 150 python3 -m mgpu_dask.run bench --tasks logreg --workers-list 1,2,4 --fractions 0.25,1,4 --backends numba,cupy --repeats 2 --quiet --append --out /tmp/bench > /tmp/bench/logreg3.log 2>&1; echo rc=$?; grep -E "^logreg +(numba|cupy)" /tmp/bench/logreg3.log | tee -a $OUT/summary.log
tar czf $OUT/bench.tgz -C /tmp bench
for r in "1 1" "1 4" "4 1" "4 4"; do set -- $r
  log "logreg f$1 w$2"; timeout 40 python3 -m mgpu_dask.run logreg --workers $2 --fraction $1 --repeats 5 --quiet --json /tmp/runs/logreg_f$1_w$2.json 2>&1 | grep -E "accuracy|warm|evaluations" | tee -a $OUT/summary.log
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print({k: (round(v,4) if isinstance(v,float) else v) for k,v in r['fit_profile'].items()})" /tmp/runs/logreg_f$1_w$2.json | tee -a $OUT/summary.log
done
tar czf $OUT/runs.tgz -C /tmp runs
log gpu-tests; timeout 60 python3 -m pytest -q -m gpu tests -k "shard_objective or single_host" 2>&1 | tail -4 | tee -a $OUT/summary.log
