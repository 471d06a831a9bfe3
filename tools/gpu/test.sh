#!/usr/bin/env bash
# Runs the whole test suite on the NVIDIA GPU (after build.sh): every entry,
# the cuda:0 ones required to run (not skipped), with cuBLAS; then the
# cuda:0 entries again with the module's own GEMM kernel (UG_GEMM=own);
# then ug-train on cuda:0 alone and under mpirun: one rank through NCCL,
# and two ranks on the one GPU (NCCL refuses them: MPI through host
# memory), each within 0.5 points of the one device's test accuracy.
# When the driver has an OpenCL library, opencl:0 is NVIDIA's OpenCL device
# and is required too. The emulated-GPU entries are left to CI.
# Logs go to $1 (default: the build folder).
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/gpu/env.sh
logs=${1:-$UG_GPU_BUILD}
mkdir -p "$logs"
required=cpu,cuda:0
if [ -n "$nvidia_opencl" ]; then
    required=$required,opencl:0
fi
jobs=$(( $(nproc) / 2 ))
status=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$logs/gpu.txt"
"$UG_GPU_BUILD/ug-devices" | tee -a "$logs/gpu.txt"

# A GPU's gap between two queued kernels counts as its own in the trace
# checks (check_trace.py --gap-us; about 1.3 us on an H100).
export UG_TRACE_GAP_US=3
# The pictures need gnuplot, which the GPU machine may lack (CI has it).
skip=()
if ! command -v gnuplot >/dev/null; then
    echo "gnuplot is not installed: plot_png and bench_report are left out"
    skip=(-E '^(plot_png|bench_report)$')
fi
echo "== the suite, vendor GEMM (required: $required)"
UG_TEST_REQUIRED_DEVICES=$required ctest "${skip[@]}" --test-dir "$UG_GPU_BUILD" -LE emulated -j "$jobs" \
    --output-on-failure >"$logs/ctest-vendor.log" 2>&1 || status=1
tail -n 25 "$logs/ctest-vendor.log"

echo "== the cuda:0 entries, own GEMM kernel (UG_GEMM=own)"
UG_GEMM=own UG_TEST_REQUIRED_DEVICES=cpu,cuda:0 ctest --test-dir "$UG_GPU_BUILD" -R '@cuda:0$' -j "$jobs" \
    --output-on-failure >"$logs/ctest-own.log" 2>&1 || status=1
tail -n 25 "$logs/ctest-own.log"

echo "== ug-train --device cuda:0 --epochs 1: alone, mpirun -np 1 (NCCL), mpirun -np 2 (MPI)"
data=$UG_GPU_PREFIX/usr/share/datasets/fashion-mnist
accuracy() { sed -n 's/.*test accuracy \([0-9.]*\)%.*/\1/p' "$1" | tail -n 1; }
train=("$UG_GPU_BUILD/ug-train" --device cuda:0 --epochs 1 --batch-size 64 --data "$data" --quiet)
"${train[@]}" >"$logs/train-alone.log" 2>&1 || status=1
alone=$(accuracy "$logs/train-alone.log")
echo "one device: ${alone:-?}%"
for ranks in 1 2; do
    if [ ! -x "$ug_gpu_mpirun" ]; then
        echo "no Open MPI in $UG_GPU_PREFIX (fetch-debs.sh brings it): the mpirun runs are left out"
        status=1
        break
    fi
    "$ug_gpu_mpirun" --oversubscribe -np $ranks "${train[@]}" >"$logs/train-mpi$ranks.log" 2>&1 || status=1
    got=$(accuracy "$logs/train-mpi$ranks.log")
    grep -E "^data parallel|gradients go" "$logs/train-mpi$ranks.log"
    echo "mpirun -np $ranks: ${got:-?}%"
    python3 -c "import sys; sys.exit(not abs(float('${got:-nan}') - float('${alone:-nan}')) <= 0.5)" || {
        echo "mpirun -np $ranks is not within 0.5 points of one device"
        status=1
    }
done
exit $status
