#!/usr/bin/env bash
# Where a cold `knn --workers W` process spends its time (device machine, repo
# root): import times of the heavy modules in fresh interpreters, then one
# whole run with wall-clock marks at interpreter start, main() return and
# interpreter exit, and Python's -X importtime of the client process.
# Usage: bash benchmarks/cold_probe.sh   (writes $OUT/cold_probe.log)
set -u
source benchmarks/device_env.sh > /dev/null
W=$(nvidia-smi -L | wc -l)
{
for m in dask distributed dask_cuda cupy numba numba.cuda mgpu_dask.run; do
  python3 -c "import time; s=time.perf_counter(); import $m; print('import $m: %.2f s' % (time.perf_counter() - s))"
done
s=$(date +%s%N)
python3 -X importtime -c "
import time, atexit
t0 = time.time()
atexit.register(lambda: print('atexit handlers start at %.2f s' % (time.time() - t0), flush=True))
from mgpu_dask.run import main
print('imports done at %.2f s' % (time.time() - t0), flush=True)
rc = main(['knn', '--workers', '$W', '--quiet', '--dashboard-address', ':0', '--json', '/tmp/runs/cold_probe.json'])
print('main returned %s at %.2f s' % (rc, time.time() - t0), flush=True)
" 2> /tmp/runs/importtime.log
echo "process wall: $(( ($(date +%s%N) - s) / 1000000 )) ms"
echo "slowest client imports (cumulative us):"; sort -t'|' -k2 -n -r /tmp/runs/importtime.log | head -15
python3 -c "import json; r=json.load(open('/tmp/runs/cold_probe.json')); print(r['cold'], r['cold_steps'], r['process'])"
} > "$OUT/cold_probe.log" 2>&1
