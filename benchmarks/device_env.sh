# Sourced by the device scripts: GPU stack (gpu-stack-build parts carried as
# .gpu; with --rapids one part per call, exit 3 "waiting for parts" until the
# last), the repository on PYTHONPATH, MNIST copied from a carried .mnist to
# /tmp/mnist (later calls need not carry it).
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /tmp/runs /tmp/mnist
[ -d .mnist ] && cp -n .mnist/* /tmp/mnist/
# nvidia-ml-py (the dashboard's GPU panels) where the image lacks it: carried as .whl/nvml
[ -d .whl/nvml ] && mkdir -p /tmp/nvml && cp -rn .whl/nvml/. /tmp/nvml/
if [ -f .gpu/gpu-stack-install ]; then
  bash .gpu/gpu-stack-install > "$OUT/install.log" 2>&1; rc=$?
  # rc 3: RAPIDS parts still missing; rc 2: its count arrived before any part (the
  # script's part count fails under pipefail); either way the base alone is usable
  [ $rc -eq 0 ] || [ $rc -eq 3 ] || { [ $rc -eq 2 ] && [ -f /tmp/gpu-parts/rapids.count ]; } \
    || { cat "$OUT/install.log"; exit 1; }
  tail -1 "$OUT/install.log"
fi
if [ ! -f /tmp/gpu-stack.env ] && [ -f /tmp/gpu-parts/base.done ]; then  # base only, for now
  echo "import site; site.addsitedir('/tmp/gpu-site')" > "$(python3 -c 'import site; print(site.getsitepackages()[0])')/zz-gpu-stack.pth"
  echo 'export PYTHONPATH=/tmp/gpu-pre${PYTHONPATH:+:$PYTHONPATH}' > /tmp/gpu-stack.env
fi
source /tmp/gpu-stack.env
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
python3 -c "import pynvml" 2>/dev/null || export PYTHONPATH=$PYTHONPATH:/tmp/nvml
export MGPU_DASK_DATA_DIR=/tmp/mnist MGPU_DASK_TEST_MNIST_DIR=/tmp/mnist
log() { echo "== $*" | tee -a "$OUT/summary.log"; }
# logreg CLI on one GPU at fractions 1 and 4, each of PRECISIONS (fp32 bf16); TAG names
# the JSON files under $R
logreg_runs() {
  for f in 1 4; do for p in ${PRECISIONS:-fp32 bf16}; do
    log "logreg f$f w1 --precision $p"
    timeout 150 python3 -m mgpu_dask.run logreg --repeats 5 --quiet --workers 1 --fraction $f --precision $p --json $R/logreg_f${f}_$p${TAG:-}.json 2>&1 | grep -E "accuracy|warm|products|rror" | tee -a "$OUT/summary.log"
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['warm_fit_predict_median'], r['warm'], {k: (round(v,4) if isinstance(v,float) else v) for k,v in r['fit_profile'].items()})" $R/logreg_f${f}_$p${TAG:-}.json | tee -a "$OUT/summary.log"
  done; done
}
# --backend all for TASK at fraction F on one worker, extra CLI options after them;
# JSON and log under $R, the table into the summary
backend_table() {  # task fraction [options]
  log "$1 --backend all f$2 w1 ${*:3}"
  timeout 280 python3 -m mgpu_dask.run $1 --backend all --repeats 5 --workers 1 --fraction $2 "${@:3}" --json $R/$1_all_f$2_w1.json > "$R/$1_all_f$2.log" 2>&1
  grep -vE "^\[|^ *$" "$R/$1_all_f$2.log" | tail -14 | tee -a "$OUT/summary.log"
}
# knn CLI at fractions 1 and 4 on 1 and 2 workers, then three cold whole-process
# `knn --workers 2` runs, their JSON as $R/knn_cold_<TAG><i>.json
knn_runs() {  # [cold-tag]
  for f in 1 4; do for w in 1 2; do
    log "knn f$f w$w"
    timeout 150 python3 -m mgpu_dask.run knn --repeats 10 --quiet --workers $w --fraction $f --json $R/knn_f${f}_w$w.json 2>&1 | grep -E "accuracy|warm|rror" | tee -a "$OUT/summary.log"
  done; done
  for i in 1 2 3; do
    s=$(date +%s%N)
    python3 -m mgpu_dask.run knn --workers 2 --quiet --json $R/knn_cold_${1:-}$i.json > /dev/null 2>&1
    log "cold whole process knn --workers 2: rc $? $(( ($(date +%s%N) - s) / 1000000 )) ms"
  done
}
# tcp against ucx on 2 workers: shard-plan KNN and logistic regression
ucx_runs() {
  for p in tcp ucx; do
    log "knn shard plan $p"
    timeout 120 python3 -m mgpu_dask.run knn --workers 2 --plan shard --protocol $p --repeats 5 --quiet --json $R/knn_shard_$p.json 2>&1 | grep -E "accuracy|warm|moved|rror" | tee -a "$OUT/summary.log"
    log "logreg $p"
    timeout 120 python3 -m mgpu_dask.run logreg --workers 2 --protocol $p --repeats 3 --quiet --json $R/logreg_$p.json 2>&1 | grep -E "accuracy|warm|moved|rror" | tee -a "$OUT/summary.log"
  done
}
# the fit profile of a logreg JSON, rounded, into the summary
logreg_profile() {  # json
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(round(r['warm_fit_predict_median'],4), r.get('dtype'), r['warm'], {k: (round(v,4) if isinstance(v,float) else v) for k,v in r['fit_profile'].items()})" "$1" | cut -c1-1200 | tee -a "$OUT/summary.log"
}
# every GPU test (pytest -m gpu tests/), into $R/gpu-tests-all$TAG.log
all_gpu_tests() {
  log "pytest -m gpu tests/"
  timeout 540 python3 -m pytest -q -rfEs -m gpu tests/ > "$R/gpu-tests-all${TAG:-}.log" 2>&1
  grep -E "passed|failed|^FAILED|^ERROR" "$R/gpu-tests-all${TAG:-}.log" | tail -20 | tee -a "$OUT/summary.log"
}
# GPU tests of logistic regression whose names match PATTERN, into $R/gpu-tests-lr$TAG.log
logreg_gpu_tests() {  # pattern [timeout]
  nvidia-smi -L | tee -a "$OUT/summary.log"
  log "gpu tests of logistic regression"
  timeout ${2:-300} python3 -m pytest -q -rfE -m gpu tests/test_gpu.py -k "$1" > "$R/gpu-tests-lr${TAG:-}.log" 2>&1
  grep -E "passed|failed|^FAILED|^ERROR|^E " "$R/gpu-tests-lr${TAG:-}.log" | tail -20 | tee -a "$OUT/summary.log"
}
