#!/usr/bin/env bash
# Runs on the GPU machine (the device tool), from the repository root: the GPU stack,
# then the PHASEs asked for, in order.  Results go under $OUT/runs (each file also
# in $OUT/runs.tgz); benchmarks/summarize.py turns them into the committed JSON.
#
# Carried, as ignored folders of the repository:
#   .gpu    gpu-stack-build's parts (base and gpu-stack-install in the first call of a
#           lease; one rapids-NN or faiss-NN part per later call, calls back to back).
#           Send rapids.count or faiss.count with the first part, not with the base:
#           with a count and no part yet, gpu-stack-install stops silently (pipefail on
#           an empty ls) and this script exits before its phases.  FAISS's parts only
#           once RAPIDS' are all there: the install stops at a missing RAPIDS part before
#           it keeps FAISS's.  With both, run FAISS with PYTHONPATH=/tmp/gpu-faiss first
#           (its own RMM; RAPIDS' lacks a symbol it needs)
#   .mnist  the four MNIST files (first call; kept in /tmp/mnist for the later ones)
#   .ab     for PHASE=ab: an older commit's package, `git archive REF mgpu_dask | tar -x -C .ab`
#
# PHASEs:
#   tests    every GPU test: pytest -m gpu ${TESTS:-tests/}  (TAG names the log)
#   ab       knn and logreg --workers 1 --repeats 10, the .ab code and the working
#            tree's alternating, ROUNDS times (default 2; ORDER "old new")
#   tables   TASKS (knn logreg) --backend all --workers 1 at each of FRACTIONS (1 4)
#   runs     our knn and logreg at FRACTIONS, and on deformed MNIST (COPIES, 155)
#   faiss    knn --backend faiss,numba at FRACTIONS and on deformed MNIST (COPIES; 0: none):
#            FAISS's flat index and ours in one process (FAISS parts installed)
#   host-fit benchmarks/host_fit.py --repeats 15 (one worker), the working tree
#   first    first contact: in the first call of a lease (a fresh machine), then again
#            with NUMBA_CACHE_DIR and CUPY_CACHE_DIR new empty folders: the bare
#            LocalCUDACluster floor three times, knn and logreg --workers 1 twice each;
#            process walls in $R/first_run.json
#   first-ab first contact before and after: the working tree on the fresh machine, then
#            .ab's package and the working tree alternating, every cache empty each time
#   workers  knn and logreg with NWORKERS (1 2 4) workers sharing GPU 0
#            (tests/shared_gpu.py: a LocalCluster, CUDA_VISIBLE_DEVICES=0 per nanny)
#   workers-ab  the same, .ab's package and the working tree alternating (ROUNDS, ORDER)
#   gpus     TASKS (knn logreg) with --workers in NGPUS (1 2), one per GPU, at FRACTIONS
#            and on deformed MNIST (COPIES), ROUNDS times (default 1): a machine with
#            several GPUs
#   gpus-ab  the same with .ab's package and the working tree alternating (ROUNDS, default
#            2; ORDER), TASKS (logreg) at NGPUS (1 2): gpus_TASK_SIZE_nN_CODE_I; one GPU runs
#            the working tree's package only (both with OLD_ON_ONE=1); rounds numbered from
#            FIRST (1)
#   precisions  knn with each of PRECISIONS (bf16 auto) at FRACTIONS (0: none) and deformed
#            (COPIES), alternating ROUNDS times: the tile loop against the fused search
#   sizes-ab TASKS (logreg) at FRACTIONS (0: none) and deformed (COPIES, 0: none), .ab's
#            package and the working tree alternating (ROUNDS, ORDER): sizes_TASK_SIZE_CODE_I
#   host-fit-ab  benchmarks/host_fit.py --repeats 15 (one worker), .ab's package and the
#            working tree alternating (ROUNDS, ORDER): host_fit_CODE_n1_I
#   ahead    record the compile-ahead list (python -m mgpu_dask.jobs.ahead --record) into
#            $OUT/ahead.json and use it in the working tree here
#   knn-data benchmarks/knn_data.py (own data: ours, FAISS, PyTorch, cuML) for CASES (all),
#            then CASE (1m-128) with NWORKERS (2 4) workers sharing GPU 0, ours only, the
#            training rows sharded over them (PLAN, default shard)
#   first-data-ab  own data's first fit (and KNN's first predict) of TASKS (logreg) at CASE
#            (1m-128) with empty caches, .ab's package and the working tree alternating
#            (ROUNDS, ORDER): first_TASK_CODE_I
#   logreg-data  benchmarks/logreg_data.py (own data: ours, PyTorch, cuML) for CASES (all)
#   first-data   own data's first calls: knn_data.py and logreg_data.py (CASE, 1m-128, ours)
#            in new processes, NUMBA_CACHE_DIR and CUPY_CACHE_DIR empty, then filled by
#            the first: first_{knn,logreg}_{empty,warm}.json (fit_s, first_predict_s,
#            first_fit_s), and the CompileWarning lines
#   own-scaling  own data, ours only: logreg_data.py and knn_data.py (--plan shard) for CASE
#            (10m-96) on NGPUS (1 2) GPUs, one worker each (lr_gN, knn_gN), then for
#            SHARED_CASE (1m-128) with NWORKERS (1 2 4) workers sharing GPU 0
#            (lr_shared_nN, knn_shared_nN)
#   timeline benchmarks/lbfgs_timeline_gpus.py (the L-BFGS without Dask under CUPTI) at
#            FRACTIONS (1 4) rows over each of NGPUS (1 2) GPUs, .ab's package and the
#            working tree in ORDER: lbfgs_timeline_fF_gN_CODE (its events in .events.json)
#   none     the stack only (a call that carries one more part)
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}; R=$OUT/runs; mkdir -p "$R" /tmp/mnist
[ -d .mnist ] && cp -n .mnist/* /tmp/mnist/
if [ -f .gpu/gpu-stack-install ]; then
  bash .gpu/gpu-stack-install > "$OUT/install.log" 2>&1; rc=$?
  # 3: RAPIDS or FAISS parts still on their way; the base alone is usable meanwhile
  [ $rc -eq 0 ] || [ $rc -eq 3 ] || { cat "$OUT/install.log"; exit 1; }
  tail -1 "$OUT/install.log"
fi
if [ ! -f /tmp/gpu-stack.env ] && [ -f /tmp/gpu-parts/base.done ]; then  # base only, for now
  echo "import site; site.addsitedir('/tmp/gpu-site')" > "$(python3 -c 'import site; print(site.getsitepackages()[0])')/zz-gpu-stack.pth"
  echo 'export PYTHONPATH=/tmp/gpu-pre${PYTHONPATH:+:$PYTHONPATH}' > /tmp/gpu-stack.env
fi
source /tmp/gpu-stack.env
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export MGPU_DASK_DATA_DIR=/tmp/mnist MGPU_DASK_TEST_MNIST_DIR=/tmp/mnist
log() { echo "== $*" | tee -a "$OUT/summary.log"; }
cli() {  # name, then the CLI's arguments: its JSON as $R/name.json, its output as name.log
  local name=$1; shift
  log "$name: python -m mgpu_dask.run $*"
  timeout ${LIMIT:-280} python3 -m mgpu_dask.run "$@" --json "$R/$name.json" > "$R/$name.log" 2>&1
  grep -E "^accuracy|^warm|^error|^note|^model" "$R/$name.log" | cut -c1-300 | tee -a "$OUT/summary.log"
}
walled() {  # name, then a command: its process wall in $R/walls.txt, its output in name.log
  local name=$1; shift; local t0=$EPOCHREALTIME
  "$@" > "$R/$name.log" 2>&1; local rc=$?
  echo "$name $(awk "BEGIN{print $EPOCHREALTIME - $t0}") $rc" | tee -a "$R/walls.txt" "$OUT/summary.log"
}
FLOOR='from dask_cuda import LocalCUDACluster
from distributed import Client
def one():
    import cupy
    return int(cupy.arange(10).sum())
if __name__ == "__main__":
    with LocalCUDACluster(n_workers=1, dashboard_address=None) as c, Client(c) as client:
        assert client.submit(one).result() == 45'
# Numba's cache stamps each kernel's source file with its mtime and size, and a carried
# copy gets new mtimes at every call: each call would compile every kernel again (~10 s
# per job).  An mtime made from each file's content keeps the cache valid across the
# calls of a lease, and still changes with the file.
find mgpu_dask .ab -name '*.py' 2>/dev/null | while read -r f; do
  touch -d "@$((16#$(sha1sum "$f" | cut -c1-7)))" "$f"
done
nvidia-smi -L | tee -a "$OUT/summary.log"
for phase in ${PHASE:-none}; do
# A phase that runs .ab's package needs .ab carried in this very call (a carried path a
# call does not name is deleted there): without it the old side's runs fail one by one.
case "$phase" in
  *-ab|ab|timeline)
    if [ ! -d .ab/mgpu_dask ] && [[ " ${ORDER:-old new} " == *" old "* ]]; then
      log "error: PHASE=$phase runs .ab's package, and .ab is not here: carry it in this call"
      continue
    fi ;;
esac
case "$phase" in
tests)
  log "pytest -m gpu tests/ (${TAG:-base})"
  timeout ${LIMIT:-560} python3 -m pytest -q -rfEs -m gpu ${TESTS:-tests/} > "$R/gpu-tests${TAG:-}.log" 2>&1
  grep -E "passed|failed|^FAILED|^ERROR" "$R/gpu-tests${TAG:-}.log" | tail -20 | tee -a "$OUT/summary.log"
  ;;
ab)
  # The old code runs from inside .ab: `python -m` puts the working directory first on
  # sys.path, ahead of PYTHONPATH, so from here it would import the working tree's package.
  for i in $(seq ${ROUNDS:-2}); do for code in ${ORDER:-old new}; do
    where=$PWD; [ "$code" = old ] && where=$PWD/.ab
    for task in knn logreg; do
      (cd "$where" && PYTHONPATH=$where:$PYTHONPATH cli "ab_${task}_${code}_$i" $task \
        --workers 1 --repeats 10 --quiet)
      grep -q "\"command\": \"$where/mgpu_dask/run.py" "$R/ab_${task}_${code}_$i.json" ||
        log "ab_${task}_${code}_$i: did not run the package in $where"
    done
  done; done
  ;;
sizes-ab)
  top=$PWD; base=$PYTHONPATH
  for i in $(seq ${ROUNDS:-2}); do for code in ${ORDER:-old new}; do
    where=$top; [ "$code" = old ] && where=$top/.ab
    for task in ${TASKS:-logreg}; do
      repeats=10; [ $task = logreg ] && repeats=5
      for f in ${FRACTIONS:-1 4}; do
        [ "$f" = 0 ] && continue
        (cd "$where" && PYTHONPATH=$where:$base cli "sizes_${task}_f${f}_${code}_$i" $task \
          --workers 1 --fraction $f --repeats $repeats --quiet)
      done
      [ "${COPIES:-155}" = 0 ] && continue
      (cd "$where" && PYTHONPATH=$where:$base cli "sizes_${task}_deformed_${code}_$i" $task \
        --dataset mnist-deformed --copies ${COPIES:-155} --workers 1 --repeats 3 --quiet)
    done
  done; done
  ;;
host-fit-ab)
  top=$PWD; base=$PYTHONPATH
  for i in $(seq ${ROUNDS:-2}); do for code in ${ORDER:-old new}; do
    where=$top; [ "$code" = old ] && where=$top/.ab
    name=host_fit_${code}_n1_$i
    log "$name: python benchmarks/host_fit.py --repeats 15 ($where)"
    (cd "$where" && PYTHONPATH=$where:$base timeout 250 python3 "$top/benchmarks/host_fit.py" \
      "$R/$name.json" --repeats 15 > "$R/$name.log" 2>&1)
    tail -1 "$R/$name.log" | cut -c1-300 | tee -a "$OUT/summary.log"
  done; done
  ;;
ahead)
  log "python -m mgpu_dask.jobs.ahead --record"
  python3 -m mgpu_dask.jobs.ahead --record "$OUT/ahead.json" 2>&1 | tail -2 | tee -a "$OUT/summary.log"
  [ -s "$OUT/ahead.json" ] && cp "$OUT/ahead.json" mgpu_dask/jobs/ahead.json
  ;;
tables)
  for f in ${FRACTIONS:-1 4}; do for task in ${TASKS:-knn logreg}; do
    LIMIT=400 cli "table_${task}_f$f" $task --backend all --workers 1 --fraction $f \
      --repeats ${REPEATS:-3} --quiet
  done; done
  ;;
runs)
  for f in ${FRACTIONS:-1 4}; do
    cli "knn_f$f" knn --workers 1 --fraction $f --repeats 10 --quiet
    cli "logreg_f$f" logreg --workers 1 --fraction $f --repeats 5 --quiet
  done
  cli knn_deformed knn --dataset mnist-deformed --copies ${COPIES:-155} --workers 1 --repeats 3 --quiet
  cli logreg_deformed logreg --dataset mnist-deformed --copies ${COPIES:-155} --workers 1 --repeats 3 --quiet
  ;;
faiss)
  for f in ${FRACTIONS:-1 4}; do
    [ "$f" = 0 ] && continue
    LIMIT=400 cli "table_faiss_f$f" knn --backend faiss,numba --workers 1 --fraction $f --repeats 10
  done
  [ "${COPIES:-155}" = 0 ] || LIMIT=500 cli table_faiss_deformed knn --backend faiss,numba \
    --dataset mnist-deformed --copies ${COPIES:-155} --workers 1 --repeats 3
  ;;
host-fit)
  log "host_fit_n1_1: python benchmarks/host_fit.py --repeats 15"
  timeout 250 python3 benchmarks/host_fit.py "$R/host_fit_n1_1.json" --repeats 15 > "$R/host_fit_n1_1.log" 2>&1
  tail -1 "$R/host_fit_n1_1.log" | cut -c1-300 | tee -a "$OUT/summary.log"
  ;;
first)
  echo "$FLOOR" > /tmp/floor.py
  for round in fresh empty-caches; do
    if [ $round = empty-caches ]; then  # the driver's PTX cache too, as on a fresh machine
      export NUMBA_CACHE_DIR=$(mktemp -d /tmp/numba.XXXX) CUPY_CACHE_DIR=$(mktemp -d /tmp/cupy.XXXX)
      export CUDA_CACHE_PATH=$(mktemp -d /tmp/nvcache.XXXX)
    fi
    for i in 1 2 3; do walled "first_${round}_floor_$i" python3 /tmp/floor.py; done
    for task in knn logreg; do for run in first second; do
      walled "first_${round}_${task}_$run" python3 -m mgpu_dask.run $task --workers 1 \
        --json "$R/first_${round}_${task}_$run.json"
    done; done
  done
  unset NUMBA_CACHE_DIR CUPY_CACHE_DIR CUDA_CACHE_PATH
  python3 - "$R" <<'PY'
import json, sys, pathlib
R = pathlib.Path(sys.argv[1])
walls = {n: (float(s), int(rc)) for n, s, rc in (l.split() for l in (R / "walls.txt").read_text().splitlines())}
out = {"command": "PHASE=first bash benchmarks/device.sh (first call of a lease)", "rounds": {}}
for name, (seconds, rc) in walls.items():
    if not name.startswith("first_"):
        continue
    _, rnd, what = name.split("_", 2)
    entry = {"wall_seconds": seconds, "exit": rc}
    run = R / f"{name}.json"
    if run.exists():
        got = json.loads(run.read_text())
        out["machine"] = got.get("machine")
        entry.update(phases=got.get("cold"), kernels=got.get("kernels"),
                     kernel_caches=got.get("kernel_caches"), accuracy=got.get("accuracy"))
    out["rounds"].setdefault(rnd, {})[what] = entry
(R / "first_run.json").write_text(json.dumps(out, indent=2) + "\n")
PY
  ;;
first-ab)
  # First contact, before and after: the working tree in the first call of a lease (the
  # user's caches, a fresh machine), then .ab's package and the working tree alternating
  # (ROUNDS, default 2), each with empty Numba, CuPy and driver (CUDA_CACHE_PATH) caches:
  # the floor, knn and logreg --workers 1 twice each.  Walls in $R/walls.txt.
  echo "$FLOOR" > /tmp/floor.py
  top=$PWD; base=$PYTHONPATH
  contact() {  # code round
    local where=$top; [ "$1" = old ] && where=$top/.ab
    (cd "$where" && export PYTHONPATH=$where:$base
     walled "floor_$1_$2" python3 /tmp/floor.py
     for task in knn logreg; do for run in first second; do
       walled "${task}_$1_${run}_$2" python3 -m mgpu_dask.run $task --workers 1 \
         --json "$R/${task}_$1_${run}_$2.json"
     done; done)
  }
  contact new fresh
  for round in $(seq ${ROUNDS:-2}); do
    order="old new"; [ $((round % 2)) = 0 ] && order="new old"
    for code in $order; do
      (export NUMBA_CACHE_DIR=$(mktemp -d /tmp/numba.XXXX) CUPY_CACHE_DIR=$(mktemp -d \
        /tmp/cupy.XXXX) CUDA_CACHE_PATH=$(mktemp -d /tmp/nv.XXXX); contact $code $round)
    done
  done
  ;;
workers)
  for n in ${NWORKERS:-1 2 4}; do for task in knn logreg; do
    log "workers_${task}_n$n: tests/shared_gpu.py $n -- python -m mgpu_dask.run $task --repeats 10"
    timeout 280 python3 tests/shared_gpu.py $n -- python3 -m mgpu_dask.run $task --repeats 10 \
      --quiet --json "$R/workers_${task}_n$n.json" > "$R/workers_${task}_n$n.log" 2>&1
    grep -E "^accuracy|^warm|^error|^note" "$R/workers_${task}_n$n.log" | cut -c1-300 | tee -a "$OUT/summary.log"
  done; done
  ;;
workers-ab)
  top=$PWD; base=$PYTHONPATH
  for i in $(seq ${ROUNDS:-2}); do for code in ${ORDER:-old new}; do
    where=$top; [ "$code" = old ] && where=$top/.ab
    for n in ${NWORKERS:-1 2 4}; do for task in ${TASKS:-knn logreg}; do
      name=workers_${task}_${code}_n${n}_$i
      log "$name: tests/shared_gpu.py $n -- python -m mgpu_dask.run $task --repeats 10 ($where)"
      (cd "$where" && PYTHONPATH=$where:$base timeout 280 python3 "$top/tests/shared_gpu.py" $n \
        -- python3 -m mgpu_dask.run $task --repeats 10 --quiet --json "$R/$name.json" \
        > "$R/$name.log" 2>&1)
      grep -E "^accuracy|^warm|^error|^note" "$R/$name.log" | cut -c1-300 | tee -a "$OUT/summary.log"
    done; done
  done; done
  ;;
gpus)
  for i in $(seq ${ROUNDS:-1}); do for n in ${NGPUS:-1 2}; do for task in ${TASKS:-knn logreg}; do
    repeats=10; [ $task = logreg ] && repeats=5
    for f in ${FRACTIONS:-1 4}; do
      [ "$f" = 0 ] && continue
      cli "gpus_${task}_f${f}_n${n}_$i" $task --workers $n --fraction $f --repeats $repeats --quiet
    done
    [ "${COPIES:-155}" = 0 ] && continue
    cli "gpus_${task}_deformed_n${n}_$i" $task --dataset mnist-deformed --copies ${COPIES:-155} \
      --workers $n --repeats 3 --quiet
  done; done; done
  ;;
gpus-ab)
  top=$PWD; base=$PYTHONPATH
  for i in $(seq ${FIRST:-1} $(( ${FIRST:-1} + ${ROUNDS:-2} - 1 ))); do for code in ${ORDER:-old new}; do
    where=$top; [ "$code" = old ] && where=$top/.ab
    for n in ${NGPUS:-1 2}; do for task in ${TASKS:-logreg}; do
      [ "$code" = old ] && [ "$n" = 1 ] && [ "${OLD_ON_ONE:-0}" = 0 ] && continue
      repeats=10; [ $task = logreg ] && repeats=5
      for f in ${FRACTIONS:-1 4}; do
        [ "$f" = 0 ] && continue
        (cd "$where" && PYTHONPATH=$where:$base cli "gpus_${task}_f${f}_n${n}_${code}_$i" $task \
          --workers $n --fraction $f --repeats $repeats --quiet)
      done
      [ "${COPIES:-155}" = 0 ] && continue
      (cd "$where" && PYTHONPATH=$where:$base cli "gpus_${task}_deformed_n${n}_${code}_$i" \
        $task --dataset mnist-deformed --copies ${COPIES:-155} --workers $n --repeats 3 --quiet)
    done; done
  done; done
  ;;
precisions)
  # knn with each of PRECISIONS (bf16: the tile loop; auto: int8, the fused search) at
  # FRACTIONS and on deformed MNIST (COPIES; 0 skips it), alternating, ROUNDS times
  for i in $(seq ${ROUNDS:-2}); do for p in ${PRECISIONS:-bf16 auto}; do
    for f in ${FRACTIONS:-1 4}; do
      [ "$f" = 0 ] && continue
      cli "precision_knn_${p}_f${f}_$i" knn --precision $p --workers 1 --fraction $f --repeats 10 --quiet
    done
    [ "${COPIES:-155}" = 0 ] && continue
    cli "precision_knn_${p}_deformed_$i" knn --precision $p --dataset mnist-deformed \
      --copies ${COPIES:-155} --workers 1 --repeats 3 --quiet
  done; done
  ;;
knn-data)
  log "knn_data: python benchmarks/knn_data.py OUT --cases ${CASES:-all}"
  cases=${CASES:-all}; [ "$cases" = all ] && cases=100k-32,1m-128,1m-768-cosine,10m-96,1m-128-100kq
  timeout ${LIMIT:-560} python3 benchmarks/knn_data.py "$R/knn_data.json" --cases "$cases" \
    --repeats ${REPEATS:-5} > "$R/knn_data.log" 2>&1
  tail -8 "$R/knn_data.log" | cut -c1-400 | tee -a "$OUT/summary.log"
  for n in ${NWORKERS:-2 4}; do
    log "knn_data_n$n: tests/shared_gpu.py $n -- python benchmarks/knn_data.py OUT --cases ${CASE:-1m-128} --no-peers --plan ${PLAN:-shard}"
    timeout 280 python3 tests/shared_gpu.py $n -- python3 benchmarks/knn_data.py \
      "$R/knn_data_n$n.json" --cases ${CASE:-1m-128} --no-peers --plan ${PLAN:-shard} \
      > "$R/knn_data_n$n.log" 2>&1
    tail -2 "$R/knn_data_n$n.log" | cut -c1-300 | tee -a "$OUT/summary.log"
  done
  ;;
first-data)
  # Own data's first calls in new processes: the caches empty, then filled by the first
  export NUMBA_CACHE_DIR=/tmp/first-data-nc CUPY_CACHE_DIR=/tmp/first-data-cc
  rm -rf "$NUMBA_CACHE_DIR" "$CUPY_CACHE_DIR"; mkdir -p "$NUMBA_CACHE_DIR" "$CUPY_CACHE_DIR"
  for run in empty warm; do
    log "first_{knn,logreg}_$run: knn_data.py and logreg_data.py --cases ${CASE:-1m-128} --no-peers"
    timeout 200 python3 benchmarks/knn_data.py "$R/first_knn_$run.json" --cases ${CASE:-1m-128} \
      --no-peers --repeats 3 > "$R/first_knn_$run.log" 2>&1
    timeout 200 python3 benchmarks/logreg_data.py "$R/first_logreg_$run.json" \
      --cases ${CASE:-1m-128} --no-peers > "$R/first_logreg_$run.log" 2>&1
    grep -h "CompileWarning" "$R/first_knn_$run.log" "$R/first_logreg_$run.log" | cut -c1-200 \
      | tee -a "$OUT/summary.log"
  done
  unset NUMBA_CACHE_DIR CUPY_CACHE_DIR
  ;;
first-data-ab)
  # Own data's first fit (logreg) or fit and predict (knn) with empty kernel caches, TASKS
  # (logreg), .ab's package and the working tree's alternating (ROUNDS, default 2):
  # first_TASK_CODE_I
  top=$PWD; base=$PYTHONPATH
  for i in $(seq ${ROUNDS:-2}); do for code in ${ORDER:-old new}; do for task in ${TASKS:-logreg}; do
    where=$top; [ "$code" = old ] && where=$top/.ab
    export NUMBA_CACHE_DIR=/tmp/fa-nc-$task-$code-$i CUPY_CACHE_DIR=/tmp/fa-cc-$task-$code-$i
    rm -rf "$NUMBA_CACHE_DIR" "$CUPY_CACHE_DIR"; mkdir -p "$NUMBA_CACHE_DIR" "$CUPY_CACHE_DIR"
    script=logreg_data.py extra=; [ $task = knn ] && script=knn_data.py extra="--repeats 3"
    log "first_${task}_${code}_$i: $script --cases ${CASE:-1m-128} --no-peers $extra ($where)"
    (cd "$where" && PYTHONPATH=$where:$base timeout 150 python3 "$top/benchmarks/$script" \
      "$R/first_${task}_${code}_$i.json" --cases ${CASE:-1m-128} --no-peers $extra \
      > "$R/first_${task}_${code}_$i.log" 2>&1)
    unset NUMBA_CACHE_DIR CUPY_CACHE_DIR
  done; done; done
  ;;
logreg-data)
  log "logreg_data: python benchmarks/logreg_data.py OUT --cases ${CASES:-all}"
  timeout ${LIMIT:-560} python3 benchmarks/logreg_data.py "$R/logreg_data.json" \
    --cases ${CASES:-all} > "$R/logreg_data.log" 2>&1
  tail -8 "$R/logreg_data.log" | cut -c1-400 | tee -a "$OUT/summary.log"
  ;;
own-scaling)
  for n in ${NGPUS:-1 2}; do
    gpus=$(seq -s, 0 $((n - 1)))
    log "lr_g$n, knn_g$n: CUDA_VISIBLE_DEVICES=$gpus, ${CASE:-10m-96}, ours only"
    CUDA_VISIBLE_DEVICES=$gpus timeout 200 python3 benchmarks/logreg_data.py "$R/lr_g$n.json" \
      --cases ${CASE:-10m-96} --no-peers > "$R/lr_g$n.log" 2>&1
    CUDA_VISIBLE_DEVICES=$gpus timeout 200 python3 benchmarks/knn_data.py "$R/knn_g$n.json" \
      --cases ${CASE:-10m-96} --no-peers --plan shard > "$R/knn_g$n.log" 2>&1
    tail -1 "$R/lr_g$n.log" "$R/knn_g$n.log" | cut -c1-200 | tee -a "$OUT/summary.log"
  done
  for n in ${NWORKERS:-1 2 4}; do
    log "lr_shared_n$n, knn_shared_n$n: tests/shared_gpu.py $n, ${SHARED_CASE:-1m-128}, ours only"
    CUDA_VISIBLE_DEVICES=0 timeout 150 python3 tests/shared_gpu.py $n -- python3 \
      benchmarks/logreg_data.py "$R/lr_shared_n$n.json" --cases ${SHARED_CASE:-1m-128} \
      --no-peers > "$R/lr_shared_n$n.log" 2>&1
    CUDA_VISIBLE_DEVICES=0 timeout 150 python3 tests/shared_gpu.py $n -- python3 \
      benchmarks/knn_data.py "$R/knn_shared_n$n.json" --cases ${SHARED_CASE:-1m-128} \
      --no-peers --plan shard > "$R/knn_shared_n$n.log" 2>&1
    tail -1 "$R/lr_shared_n$n.log" "$R/knn_shared_n$n.log" | cut -c1-200 | tee -a "$OUT/summary.log"
  done
  ;;
timeline)
  top=$PWD; base=$PYTHONPATH
  for code in ${ORDER:-old new}; do
    where=$top; [ "$code" = old ] && where=$top/.ab
    for f in ${FRACTIONS:-1 4}; do for n in ${NGPUS:-1 2}; do
      name=lbfgs_timeline_f${f}_g${n}_$code
      log "$name: python benchmarks/lbfgs_timeline_gpus.py OUT $f $n ($where)"
      (cd "$where" && PYTHONPATH=$where:$base timeout 200 python3 \
        "$top/benchmarks/lbfgs_timeline_gpus.py" "$R/$name.json" $f $n > "$R/$name.log" 2>&1)
      tail -1 "$R/$name.log" | cut -c1-400 | tee -a "$OUT/summary.log"
    done; done
  done
  ;;
none) ;;
*) log "unknown phase $phase"; exit 2 ;;
esac
done
tar czf "$OUT/runs.tgz" -C "$OUT" runs
