#!/bin/sh
# The examples say how far an epoch has got before it ends (an epoch of
# examples/cnn.c takes minutes on a CPU, and nothing else is printed
# until it ends): a line for the run's first step comes before the first
# epoch's. The CNN on 320 generated images (make_idx.sh) is stopped once
# its first epoch is reported; the regression runs whole. UG_DEVICE picks
# the CNN's device.
# Usage: examples_progress.sh CNN REGRESSION
set -u
cnn=$1 regression=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/ug-examples-progress.XXXXXX")
pid=
trap '[ -n "$pid" ] && kill $pid 2> /dev/null; rm -rf "$dir"' EXIT
failed=0
fail() { echo "FAIL $*"; failed=1; }
sh "$(dirname "$0")/make_idx.sh" "$dir" 320 || exit 1

# before OUTPUT FIRST SECOND: both lines are there, FIRST's line before SECOND's.
before() {
    first=$(grep -n "$2" "$1" | head -n 1 | cut -d: -f1)
    second=$(grep -n "$3" "$1" | head -n 1 | cut -d: -f1)
    [ -n "$first" ] && [ -n "$second" ] && [ "$first" -lt "$second" ]
}

"$cnn" "$dir" "$dir/run.safetensors" > "$dir/cnn.out" 2>&1 &
pid=$!
for _ in $(seq 1 6000); do
    grep -q '^epoch 1:' "$dir/cnn.out" && break
    kill -0 $pid 2> /dev/null || break
    sleep 0.1
done
kill $pid 2> /dev/null
wait $pid 2> /dev/null
pid=
cat "$dir/cnn.out"
before "$dir/cnn.out" '^epoch 1 step 1/[0-9]*: loss [0-9.]*, [0-9]* samples/s$' '^epoch 1:' ||
    fail "cnn: no line for the first step before the first epoch's"

"$regression" --device cpu --epochs 2 > "$dir/regression.out" 2>&1
cat "$dir/regression.out"
before "$dir/regression.out" '^epoch  1 step 1/[0-9]*: train MSE [0-9.]*, [0-9]* samples/s$' '^epoch  1:' ||
    fail "regression: no line for the first step before the first epoch's"
exit $failed
