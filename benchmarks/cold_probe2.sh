#!/usr/bin/env bash
# Cold start of `python -m mgpu_dask.run knn --workers W` (device machine, repo
# root): whole-process wall time with workers forked from the fork server
# (default) and spawned (worker-start: spawn), a run with time marks at main()
# return and interpreter exit, and the first KNN block in a fresh process with
# and without mgpu_dask.worker_imports loaded first (first_call_probe.py).
# Usage: bash benchmarks/cold_probe2.sh   (writes $OUT/cold2/*)
set -u
source benchmarks/device_env.sh > /dev/null
W=$(nvidia-smi -L | wc -l)
D=$OUT/cold2; mkdir -p $D
one() {  # name, command...
  local name=$1; shift
  local s=$(date +%s%N)
  "$@" knn --workers $W --quiet --dashboard-address :0 --json $D/$name.json > $D/$name.log 2>&1
  local rc=$?
  echo "$name: rc $rc, process wall $(( ($(date +%s%N) - s) / 1000000 )) ms" | tee -a $D/summary.log
  python3 -c "import json,sys; r=json.load(open('$D/$name.json')); print('  ', {k: round(v,3) for k,v in r['cold'].items()}, {k: round(v,3) for k,v in r['cold_steps'].items()}, r['process'], 'warm', r.get('warm_predict_median'), 'acc', r['accuracy'])" >> $D/summary.log 2>&1
}
one warmup python3 -m mgpu_dask.run
for i in 1 2 3; do one forkserver$i python3 -m mgpu_dask.run; done
for i in 1 2; do DASK_MGPU_DASK__CLUSTER__WORKER_START=spawn one spawn$i python3 -m mgpu_dask.run; done
s=$(date +%s%N)
python3 -c "
import time, atexit, psutil
t0 = psutil.Process().create_time()
atexit.register(lambda: print('atexit handlers start at %.2f s' % (time.time() - t0), flush=True))
from mgpu_dask.run import main
rc = main(['knn', '--workers', '$W', '--quiet', '--dashboard-address', ':0', '--json', '$D/marks.json'])
print('main returned %s at %.2f s' % (rc, time.time() - t0), flush=True)
" > $D/marks.log 2>&1
echo "marks: process wall $(( ($(date +%s%N) - s) / 1000000 )) ms; $(tr '\n' ' ' < $D/marks.log | tail -c 300)" >> $D/summary.log
python3 benchmarks/first_call_probe.py bf16 > $D/first_call.log 2>&1
python3 benchmarks/first_call_probe.py bf16 preload > $D/first_call_preload.log 2>&1
tail -1 $D/first_call.log >> $D/summary.log; tail -1 $D/first_call_preload.log >> $D/summary.log
cat $D/summary.log
