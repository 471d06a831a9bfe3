#!/bin/sh
# ug-bench pipeline prints a row per stage (its device, layers, busy
# share and memory, each stage's memory below the whole model's plan),
# the step beside one device's, and the bubble beside (p-1)/(m+p-1):
# over cpu and opencl:0 in this process, and over 2 MPI processes when
# mpirun is given. One stage is refused. Figures are the benchmark's, not
# checked here (a loaded machine's are noise).
# Usage: bench_pipeline.sh UG_BENCH [MPIEXEC or -]
set -u
bench=$1 mpiexec=${2:-}
dir=$(mktemp -d "${TMPDIR:-/tmp}/ug-bench-pipeline.XXXXXX")
trap 'rm -rf "$dir"' EXIT
failed=0
fail() { echo "FAIL $*"; failed=1; }

check() { # output file, stages, theory
    out=$1 stages=$2 theory=$3
    cat "$out"
    grep -q "^pipeline: $stages stages" "$out" || fail "no header line for $stages stages"
    rows=$(awk '/^stage /{on=1; next} on && /^[0-9]+ /{n++} /^one device/{on=0} END{print n+0}' "$out")
    [ "$rows" = "$stages" ] || fail "$rows stage rows, not $stages"
    awk '/^[0-9]+ / && $NF + 0 >= 1 { bad = 1 } END { exit bad }' "$out" ||
        fail "a stage's memory is not below the whole model's plan"
    grep -q "^step: pipeline [0-9.]* ms, one device [0-9.]* ms" "$out" || fail "no step line"
    grep -q "theory (p-1)/(m+p-1) = $theory%" "$out" || fail "no bubble line beside the theory's $theory%"
}

if "$bench" pipeline --stages cpu,opencl:0 --width 64 --steps 2 > "$dir/local.out" 2>&1; then
    check "$dir/local.out" 2 11.1
elif grep -q "opencl:0" "$dir/local.out"; then
    echo "skipping the in-process run: no opencl:0 ($(cat "$dir/local.out"))"
else
    cat "$dir/local.out"
    fail "ug-bench pipeline --stages cpu,opencl:0"
fi
"$bench" pipeline --stages cpu > "$dir/one.out" 2>&1 && fail "one stage passed"
grep -q "two devices or more" "$dir/one.out" || fail "one stage was not told: $(cat "$dir/one.out")"
if [ -n "$mpiexec" ] && [ "$mpiexec" != - ]; then
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$mpiexec" --oversubscribe -np 2 "$bench" pipeline \
        --width 64 --steps 2 --micro-batches 4 --batch 64 > "$dir/mpi.out" 2>&1 || fail "under mpirun"
    check "$dir/mpi.out" 2 20.0
fi
exit $failed
