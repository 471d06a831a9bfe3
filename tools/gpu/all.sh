#!/usr/bin/env bash
# Every GPU check of docs/GPU.md in one command that fits a short lease of a
# GPU machine and the 10-minute limit of one command: build.sh for the GPU
# at hand, then observe.sh (ug-smi beside nvidia-smi, traces, TensorBoard's
# reader), test.sh (the suite, the own GEMM, NCCL under mpirun) and bench.sh
# in f32 on cuda:0 (UG_GPU_QUICK=1). Each stage is stopped at its budget
# (570 s in all) so that the later ones still run and the logs come back;
# each stage's log goes to $1 (default build-gpu/logs), and a line per
# stage, its verdict and time, ends the output.
# Needs .gpu-debs/ beside the sources (fetch-debs.sh, run before on a
# machine with network).
set -uo pipefail
cd "$(dirname "$0")/../.."
logs=${1:-build-gpu/logs}
mkdir -p "$logs"
if ! ls .gpu-debs/*.deb >/dev/null 2>&1; then
    echo "no .gpu-debs/*.deb: run tools/gpu/fetch-debs.sh on a machine with network first" >&2
    exit 2
fi

# The first GPU's architecture alone (sm_90 on an H100): a build for every
# target takes minutes.
if [ -z "${UG_CUDA_ARCHS:-}" ]; then
    UG_CUDA_ARCHS=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader -i 0 2>/dev/null | tr -d '.[:space:]')
    export UG_CUDA_ARCHS
fi

summary=()
status=0
# stage NAME SECONDS COMMAND...: runs it with its output in $logs/NAME.log
# (and on the terminal), killed past SECONDS.
stage() {
    local name=$1 budget=$2 start=$SECONDS
    shift 2
    printf '\n==== %s (budget %d s)\n' "$name" "$budget"
    timeout --kill-after=10 "$budget" "$@" 2>&1 | tee "$logs/$name.log"
    local rc=${PIPESTATUS[0]} verdict=passed
    [ "$rc" = 0 ] || verdict="failed (exit $rc)"
    [ "$rc" = 124 ] || [ "$rc" = 137 ] && verdict="stopped at its budget"
    summary+=("$(printf '%-8s %-22s %4d s' "$name" "$verdict" $((SECONDS - start)))")
    [ "$rc" = 0 ] || status=1
    return "$rc"
}

stage build 150 tools/gpu/build.sh || {
    printf '%s\n' "${summary[@]}"
    exit 1
}
stage observe 90 tools/gpu/observe.sh "$logs"
stage test 180 tools/gpu/test.sh "$logs"
stage bench 150 env UG_GPU_QUICK=1 tools/gpu/bench.sh "$logs"

printf '\n==== summary (logs in %s)\n' "$logs"
printf '%s\n' "${summary[@]}"
exit $status
