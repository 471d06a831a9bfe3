#!/bin/sh
# ug-train data parallel: --devices cpu,opencl:0 (replicas in one process)
# and mpirun -np 2 (one rank per process) each reach the accuracy of one
# device within 0.5 points after one epoch of Fashion-MNIST (when it is
# installed; else 4096 generated images), and say how the batch is split;
# the local replicas also run with --profile, and the MPI run with the
# optimizer's state sharded gives the unsharded run's figures. Pipeline
# stages on cpu and opencl:0 (--stages) reach one device's accuracy within
# 0.3 points, alone and as two replicas under mpirun with the optimizer
# sharded (a grid).
# Usage: ug_train_data_parallel.sh UG_TRAIN MPIEXEC|- OPENCL(0|1)
set -u
train=$1 mpiexec=$2 opencl=$3
dir=$(mktemp -d "${TMPDIR:-/tmp}/ug-dp.XXXXXX")
trap 'rm -rf "$dir"' EXIT
failed=0
fail() { echo "FAIL $*"; failed=1; }
data=/usr/share/datasets/fashion-mnist
if [ ! -f "$data/train-images-idx3-ubyte.gz" ]; then
    data=$dir
    sh "$(dirname "$0")/../observe/make_idx.sh" "$dir" 4096 || exit 1
fi
accuracy() { sed -n 's/.*test accuracy \([0-9.]*\)%.*/\1/p' "$1" | tail -n 1; }

"$train" --device cpu --data "$data" --epochs 1 --batch-size 64 --quiet > "$dir/one.out" 2>&1 || fail "one device:"
cat "$dir/one.out"
one=$(accuracy "$dir/one.out")
check() { # name, output file[, the line saying how it splits, points within one device's]
    cat "$2"
    got=$(accuracy "$2")
    grep -q "${3:-^data parallel: }" "$2" || fail "$1 did not say how it splits the batch"
    awk -v a="$got" -v b="$one" -v most="${4:-0.5}" \
        'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= most) }' ||
        fail "$1 reached $got%, one device $one%"
    echo "ok $1: $got% against one device's $one%"
}
# Sharding the optimizer needs replicas: refused with one device.
if "$train" --device cpu --data "$data" --epochs 1 --batch-size 64 --quiet --shard-optimizer > "$dir/alone.out" 2>&1 ||
    ! grep -q "give --devices LIST, or run under mpirun" "$dir/alone.out"; then
    cat "$dir/alone.out"
    fail "--shard-optimizer on one device was not refused so"
fi
if [ "$opencl" = 1 ]; then
    "$train" --devices cpu,opencl:0 --data "$data" --epochs 1 --batch-size 64 --quiet > "$dir/local.out" 2>&1 ||
        fail "--devices cpu,opencl:0:"
    check "--devices cpu,opencl:0" "$dir/local.out"
    # The profiler started (on the main thread) while the replicas' fits
    # run on theirs: no range of theirs may fail for it.
    if "$train" --devices cpu,opencl:0 --data "$data" --epochs 1 --batch-size 64 --quiet \
        --profile "$dir/trace.json" > "$dir/profile.out" 2>&1 && [ -s "$dir/trace.json" ]; then
        echo "ok --devices cpu,opencl:0 --profile"
    else
        cat "$dir/profile.out"
        fail "--devices cpu,opencl:0 --profile"
    fi
fi
if [ "$opencl" = 1 ]; then
    # Pipeline stages: the model's layers on cpu and opencl:0, the same
    # accuracy as one device within 0.3 points.
    "$train" --stages cpu,opencl:0 --data "$data" --epochs 1 --batch-size 64 --quiet > "$dir/stages.out" 2>&1 ||
        fail "--stages cpu,opencl:0:"
    check "--stages cpu,opencl:0" "$dir/stages.out" "^pipeline: 2 stages on cpu,opencl:0" 0.3
fi
if "$train" --stages cpu --data "$data" --epochs 1 --quiet > "$dir/one_stage.out" 2>&1 ||
    ! grep -q "a pipeline needs two stages or more" "$dir/one_stage.out"; then
    cat "$dir/one_stage.out"
    fail "--stages of one device was not refused so"
fi
if [ "$mpiexec" != - ]; then
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$mpiexec" --oversubscribe -np 2 -x UG_NUM_THREADS=1 \
        "$train" --device cpu --data "$data" --epochs 1 --batch-size 64 --quiet > "$dir/mpi.out" 2>&1 ||
        fail "mpirun -np 2:"
    check "mpirun -np 2" "$dir/mpi.out"
    [ "$(grep -c '^epoch 1:' "$dir/mpi.out")" -eq 1 ] || fail "more than rank 0 printed the epoch"
    # The optimizer's state sharded over the ranks: the same run, line for line.
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$mpiexec" --oversubscribe -np 2 -x UG_NUM_THREADS=1 \
        "$train" --device cpu --data "$data" --epochs 1 --batch-size 64 --quiet --shard-optimizer \
        > "$dir/shard.out" 2>&1 || fail "mpirun -np 2 --shard-optimizer:"
    check "mpirun -np 2 --shard-optimizer" "$dir/shard.out"
    [ "$(grep '^epoch 1:' "$dir/shard.out" | sed 's/ in .*//')" = "$(grep '^epoch 1:' "$dir/mpi.out" | sed 's/ in .*//')" ] &&
        [ "$(accuracy "$dir/shard.out")" = "$(accuracy "$dir/mpi.out")" ] ||
        fail "--shard-optimizer's epoch differs from the unsharded run's"
    if [ "$opencl" = 1 ]; then
        # A grid: each process a pipeline on cpu and opencl:0, the two
        # its replicas, each stage's optimizer state sharded over them.
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$mpiexec" --oversubscribe -np 2 \
            -x UG_NUM_THREADS=1 "$train" --stages cpu,opencl:0 --data "$data" --epochs 1 --batch-size 64 --quiet \
            --shard-optimizer > "$dir/grid.out" 2>&1 || fail "mpirun -np 2 --stages cpu,opencl:0 --shard-optimizer:"
        check "mpirun -np 2 --stages cpu,opencl:0 --shard-optimizer" "$dir/grid.out" \
            "^pipeline: 2 stages on cpu,opencl:0" 0.3
        grep -q "^data parallel: 2 ranks" "$dir/grid.out" || fail "the grid did not say its replicas"
    fi
fi
if [ "$opencl" = 1 ] && "$train" --devices cpu,cpu --stages cpu,opencl:0 --data "$data" --epochs 1 --quiet \
    > "$dir/stages_devices.out" 2>&1 || ! grep -q "run under mpirun" "$dir/stages_devices.out"; then
    cat "$dir/stages_devices.out"
    fail "--stages with --devices was not refused so"
fi
exit $failed
