#!/usr/bin/env bash
# One-GPU calls of round 6 (one H200): logistic regression's evaluation on bf16
# tensor cores.  Results under /tmp/runs, tarred into $OUT/runs.tgz.
#   bf16     GPU tests of the evaluation and the device L-BFGS; the evaluation
#            probe (methods and operations); logreg CLI at fractions 1 and 4,
#            --precision auto and fp32
#   logreg   logreg CLI only (TAG names the files)
#   exports  GPU tests; the bf16 gradient's row blocks at 4M rows; logreg CLI after the
#            leader's own export in place
#   grad     the gradient's exactness per row-block size and its 100-iteration fits
#            (benchmarks/logreg_grad_probe.py); logreg CLI, --precision auto
set -u
source benchmarks/device_env.sh
R=/tmp/runs
case "${PHASE:-none}" in
bf16)
  nvidia-smi -L | tee -a "$OUT/summary.log"
  log gpu-tests
  timeout 240 python3 -m pytest -q -rA -m gpu tests/test_gpu.py -k "shard_objective or lbfgs or single_host" > "$OUT/gpu-tests.log" 2>&1
  grep -E "passed|failed|Error" "$OUT/gpu-tests.log" | tail -14 | tee -a "$OUT/summary.log"
  log eval-probe
  timeout 150 python3 benchmarks/logreg_eval_probe.py --json $R/eval_probe.json > "$OUT/eval-probe.log" 2>&1
  tail -4 "$OUT/eval-probe.log" | tee -a "$OUT/summary.log"
  logreg_runs
  ;;
logreg)
  logreg_runs
  ;;
exports)
  log gpu-tests
  timeout 240 python3 -m pytest -q -rA -m gpu tests/test_gpu.py -k "shard_objective or single_host or lbfgs" > "$OUT/gpu-tests.log" 2>&1
  grep -E "passed|failed|Error" "$OUT/gpu-tests.log" | tail -14 | tee -a "$OUT/summary.log"
  log eval-probe
  timeout 200 python3 benchmarks/logreg_eval_probe.py --json $R/eval_probe_blocks.json --methods ${METHODS:-cublas,bf16:256,bf16:1024,bf16:4096} --rows ${ROWS:-52500,210000,4068750} > "$OUT/eval-probe.log" 2>&1
  tail -4 "$OUT/eval-probe.log" | tee -a "$OUT/summary.log"
  TAG=_inplace logreg_runs
  ;;
grad)
  log gpu-tests
  timeout 240 python3 -m pytest -q -rA -m gpu tests/test_gpu.py -k "shard_objective" > "$OUT/gpu-tests.log" 2>&1
  grep -E "passed|failed|Error" "$OUT/gpu-tests.log" | tail -14 | tee -a "$OUT/summary.log"
  log grad-probe
  timeout 300 python3 benchmarks/logreg_grad_probe.py --data-dir /tmp/mnist --json $R/grad_probe.json > "$OUT/grad-probe.log" 2>&1
  tail -20 "$OUT/grad-probe.log" | tee -a "$OUT/summary.log"
  PRECISIONS=bf16 TAG=${TAG:-_blocks} logreg_runs
  ;;
esac
tar czf "$OUT/runs.tgz" -C /tmp runs
