#!/usr/bin/env bash
# The training step's figures of docs/GPU.md alone, for a lease too short
# for all.sh: build.sh; test_matmul and test_fusion on cuda:0 with each own
# GEMM kernel forced (the emulator runs a launch's blocks one after
# another, so only a GPU shows races between them, such as split K's count
# of finished slices could have); then on cuda:0 in f32 the own GEMM
# beside cuBLAS (ug-bench gemm, with and without UG_GEMM=own, and
# cublasSgemm called directly), ug-bench train-mlp|train-cnn beside
# tools/gpu/torch_train.py (PyTorch eager on the same GPU), a Chrome trace
# of the MLP at batch 64 and of the CNN at batch 128 (the kernels' times),
# and ug-bench tune's report of every choice made (cuBLAS or an own kernel
# per product, cuDNN's algorithm per convolution). Logs and traces go to
# $1 (default build-gpu/logs). About three minutes on an H100, the build
# included.
set -uo pipefail
cd "$(dirname "$0")/../.."
logs=${1:-build-gpu/logs}
mkdir -p "$logs"
tools/gpu/build.sh >"$logs/build.log" 2>&1 || {
    tail -n 30 "$logs/build.log"
    exit 1
}
. tools/gpu/env.sh
bin=$UG_GPU_BUILD
section() { printf '\n== %s\n' "$*"; }
{
    section "the own GEMM kernels' results on cuda:0 (UG_GEMM=<kernel>: test_matmul, test_fusion)"
    for gemm in own64 own128 own-dot own-split; do
        UG_GEMM=$gemm UG_TEST_REQUIRED_DEVICES=cpu,cuda:0 ctest --test-dir "$bin" -R '^(matmul|fusion)@cuda:0$' \
            --output-on-failure 2>&1 | grep -E 'tests passed|FAIL|Failed' | sed "s/^/$gemm: /"
    done
    section "gemm: cublasSgemm called directly"
    cublas_include=$(dirname "$(find /usr/local/cuda/include /usr/local/cuda/targets /opt -name cublas_v2.h -print -quit 2>/dev/null)")
    nvcc -O2 -std=c++17 -I"$cublas_include" tools/gpu/cublas_gemm.cu -Xlinker "$cublas" -o "$bin/cublas-gemm" &&
        "$bin/cublas-gemm"
    section "gemm: ug-bench gemm --device cuda:0"
    "$bin/ug-bench" gemm --device cuda:0
    section "gemm: the same with UG_GEMM=own"
    UG_GEMM=own "$bin/ug-bench" gemm --device cuda:0
    for model in mlp cnn; do
        section "train-$model: ug-bench, then PyTorch"
        "$bin/ug-bench" train-$model --device cuda:0 --precision f32 --no-epoch --no-modes
        PYTHONUNBUFFERED=1 python3 tools/gpu/torch_train.py $model --precision f32
    done
    section "traces: the MLP at batch 64, the CNN at batch 128"
    "$bin/ug-bench" train-mlp --device cuda:0 --precision f32 --no-epoch --no-modes --batch 64 \
        --trace "$logs/mlp.json" --seconds 0.5
    "$bin/ug-bench" train-cnn --device cuda:0 --precision f32 --no-epoch --no-modes --batch 128 \
        --trace "$logs/cnn.json" --seconds 0.5
    section "every choice made (ug-bench tune --device cuda:0)"
    "$bin/ug-bench" tune --device cuda:0
} 2>&1 | tee "$logs/step.log"
