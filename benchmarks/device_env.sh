# Sourced by the device scripts: GPU stack (gpu-stack-build parts carried as
# .gpu), the repository on PYTHONPATH, MNIST from the carried .mnist folder.
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /tmp/runs
bash .gpu/gpu-stack-install > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
source /tmp/gpu-stack.env
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export MGPU_DASK_DATA_DIR=$PWD/.mnist MGPU_DASK_TEST_MNIST_DIR=$PWD/.mnist
log() { echo "== $*" | tee -a "$OUT/summary.log"; }
