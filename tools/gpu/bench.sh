#!/usr/bin/env bash
# The GPU figures of docs/GPU.md, each beside its baseline in the same run
# (after build.sh): ug-bench gemm on cuda:0 through cuBLAS and through the
# module's own kernel beside cublasSgemm called directly; ug-bench
# train-mlp and train-cnn beside the same models in PyTorch on the same
# GPU, the CNN also without cuDNN, and cuDNN's choice per convolution;
# ug-train on Fashion-MNIST (one epoch, with its start-up time). When the
# driver has an OpenCL library, the same on NVIDIA's OpenCL device.
# UG_GPU_QUICK=1: cuda:0 in f32 alone (the figures the issues' targets
# name, for a short lease: all.sh sets it).
# Logs go to $1 (default: the build folder).
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/gpu/env.sh
logs=${1:-$UG_GPU_BUILD}
mkdir -p "$logs"
bin=$UG_GPU_BUILD
data=$UG_GPU_PREFIX/usr/share/datasets/fashion-mnist
devices=(cuda:0)
precisions=(f32 bf16 f16)
if [ "${UG_GPU_QUICK:-0}" = 1 ]; then
    precisions=(f32)
elif [ -n "$nvidia_opencl" ]; then
    devices+=(opencl:0)
fi
precision_list=$(IFS=,; echo "${precisions[*]}")
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
            section "train-$model: ug-bench train-$model --device $device --precision $precision_list"
            "$bin/ug-bench" train-$model --device "$device" --seconds 1 --precision "$precision_list"
        done
        for precision in "${precisions[@]}"; do
            section "train-$model: PyTorch on the same GPU, $precision"
            PYTHONUNBUFFERED=1 python3 tools/gpu/torch_train.py $model --seconds 1 --precision $precision
        done
    done

    section "train-cnn: im2col + GEMM instead of cuDNN (UG_CONV=im2col)"
    UG_CONV=im2col "$bin/ug-bench" train-cnn --device cuda:0 --seconds 1 --precision f32
    section "cuDNN's algorithm for each convolution (ug-bench tune --device cuda:0)"
    "$bin/ug-bench" tune --device cuda:0

    for device in "${devices[@]}"; do
        for precision in "${precisions[@]}"; do
            section "ug-train --epochs 1 --device $device --precision $precision (Fashion-MNIST)"
            checkpoint=$logs/ug-train-$precision.safetensors
            "$bin/ug-train" --epochs 1 --device "$device" --precision $precision --data "$data" \
                --save "$checkpoint" --quiet | tee "$logs/ug-train.out"
            accuracy=$(sed -n 's/.*test accuracy \([0-9.]*\)%.*/\1/p' "$logs/ug-train.out" | tail -n 1)
            tolerance=0.1; [ $precision = f32 ] || tolerance=0.5  # ug-train scores in $precision
            python3 tools/gpu/check_checkpoint.py "$checkpoint" "$data" --expect "$accuracy" --tolerance $tolerance
        done
    done
} 2>&1 | tee "$logs/bench.log"
