#!/usr/bin/env bash
# Runs the whole test suite on the NVIDIA GPU (after build.sh): every entry,
# the cuda:0 ones required to run (not skipped), with cuBLAS; then the
# cuda:0 entries again with the module's own GEMM kernel (UG_GEMM=own).
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
exit $status
