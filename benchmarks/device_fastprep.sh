#!/usr/bin/env bash
# After the one-pass pixel operand: the GPU tests that check exactness, then the
# deformed-MNIST KNN comparison again (cuML included; needs the RAPIDS parts).
set -u
source benchmarks/device_env.sh > /dev/null
mkdir -p $OUT/compare
timeout 120 python3 -m pytest -q -m gpu tests/test_gpu.py -k "tensor_core or local_cuda_cluster or sklearn_api or matches" -p no:cacheprovider > $OUT/compare/gpu_tests.log 2>&1
echo "gpu tests: $(tail -1 $OUT/compare/gpu_tests.log)"
T_LOGREG=1 T_KNN=${T_KNN:-150} bash benchmarks/device_deformed_compare.sh 2>&1 | grep -A6 "^knn"
