#!/bin/sh
# ug-train's progress where no one watches a terminal: with its output in a
# file, and as a rank of mpirun (whose ranks write to pseudo-terminals of
# mpirun's, which passes their output on to its own, here a file), plain
# lines, never a line redrawn with carriage returns; each epoch ends with
# one ("epoch 1/1 step 8/8 loss ... samples/s"). 512 generated images
# (tests/observe/make_idx.sh), 8 steps of 64.
# Usage: ug_train_progress.sh UG_TRAIN MPIEXEC|-
set -u
train=$1 mpiexec=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/ug-progress.XXXXXX")
trap 'rm -rf "$dir"' EXIT
failed=0
fail() { echo "FAIL $*"; failed=1; }
sh "$(dirname "$0")/../observe/make_idx.sh" "$dir" 512 || exit 1
cr=$(printf '\r')

# A terminal's line discipline may end lines with "\r\n" (script's does):
# only a carriage return inside a line redraws it.
check() { # what, output file
    if sed "s/$cr\$//" "$2" | grep -q "$cr"; then
        fail "$1: carriage returns in the output:"
        od -c "$2" | head -n 20
    elif ! grep -q '^epoch 1/1 step 8/8 loss [0-9.]* [0-9]* samples/s' "$2"; then
        fail "$1: no plain line for the epoch's end:"
        cat "$2"
    else
        echo "ok $1: plain lines"
    fi
}

"$train" --device cpu --data "$dir" --epochs 1 --batch-size 64 > "$dir/file.out" 2>&1 || fail "ug-train into a file:"
check "stdout a file" "$dir/file.out"

# One rank (no data parallelism: the same run), its stdout a terminal of
# mpirun's; where mpirun is absent, a terminal of script(1) with the
# variable Open MPI sets for each rank.
if [ "$mpiexec" != - ]; then
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$mpiexec" --oversubscribe -np 1 \
        "$train" --device cpu --data "$dir" --epochs 1 --batch-size 64 > "$dir/mpi.out" 2>&1 || fail "mpirun -np 1:"
    check "a rank of mpirun" "$dir/mpi.out"
elif command -v script > /dev/null; then
    script -qec "env OMPI_COMM_WORLD_SIZE=1 '$train' --device cpu --data '$dir' --epochs 1 --batch-size 64" \
        /dev/null > "$dir/pty.out" 2>&1 || fail "ug-train under script(1):"
    check "a rank's terminal" "$dir/pty.out"
else
    echo "skipped: neither mpirun nor script(1) to give a rank a terminal"
fi
exit $failed
