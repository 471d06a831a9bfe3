#!/usr/bin/env bash
# The GPU figures of docs/GPU.md, each beside its baseline in the same run
# (after build.sh): ug-bench gemm on cuda:0 through cuBLAS and through the
# module's own kernel beside cublasSgemm called directly; ug-bench
# train-mlp and train-cnn beside the same models in PyTorch on the same
# GPU; ug-train on Fashion-MNIST (one epoch, with its start-up time). When
# the driver has an OpenCL library, the same on NVIDIA's OpenCL device.
# Logs go to $1 (default: the build folder).
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/gpu/env.sh
logs=${1:-$UG_GPU_BUILD}
mkdir -p "$logs"
bin=$UG_GPU_BUILD
data=$UG_GPU_PREFIX/usr/share/datasets/fashion-mnist
devices=(cuda:0)
if [ -n "$nvidia_opencl" ]; then
    devices+=(opencl:0)
fi
section() { printf '\n== %s\n' "$*"; }

{
    section "gemm: cublasSgemm called directly (the ceiling)"
    cublas_include=$(dirname "$(find /usr/local/cuda/include /usr/local/cuda/targets /opt -name cublas_v2.h -print -quit 2>/dev/null)")
    nvcc -O2 -std=c++17 -I"$cublas_include" tools/gpu/cublas_gemm.cu -Xlinker "$cublas" -o "$bin/cublas-gemm" &&
        "$bin/cublas-gemm"
    for device in "${devices[@]}"; do
        section "gemm: ug-bench gemm --device $device"
        "$bin/ug-bench" gemm --device "$device"
    done
    section "gemm: ug-bench gemm --device cuda:0 with UG_GEMM=own"
    UG_GEMM=own "$bin/ug-bench" gemm --device cuda:0

    for model in mlp cnn; do
        for device in "${devices[@]}"; do
            section "train-$model: ug-bench train-$model --device $device"
            "$bin/ug-bench" train-$model --device "$device" --seconds 1
        done
        section "train-$model: PyTorch on the same GPU"
        PYTHONUNBUFFERED=1 python3 tools/gpu/torch_train.py $model --seconds 1
    done

    for device in "${devices[@]}"; do
        section "ug-train --epochs 1 --device $device (Fashion-MNIST)"
        "$bin/ug-train" --epochs 1 --device "$device" --data "$data"
    done
} 2>&1 | tee "$logs/bench.log"
