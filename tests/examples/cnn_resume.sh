#!/bin/sh
# examples/cnn.c resumes exactly: killed with SIGKILL right after its first
# checkpoint and run again, it ends with the checkpoint (weights, optimizer
# state, data order, random state) and the best weights byte for byte
# those of an uninterrupted run. 320 generated 28x28 images, as gzipped
# IDX files like Debian's. UG_DEVICE picks the device.
# Usage: cnn_resume.sh CNN
set -u
cnn=$1
dir=$(mktemp -d "${TMPDIR:-/tmp}/ug-cnn-resume.XXXXXX")
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/data" "$dir/whole" "$dir/killed"
# 320 = 0x140 samples; pixels 1..250 in a pattern of the label.
{
    printf '\0\0\10\3\0\0\1\100\0\0\0\34\0\0\0\34'
    LC_ALL=C awk 'BEGIN { for (i = 0; i < 320; i++) for (j = 0; j < 784; j++)
        printf "%c", 1 + (j * (i % 10 + 1) + 7 * i) % 250 }'
} > "$dir/data/train-images-idx3-ubyte"
{
    printf '\0\0\10\1\0\0\1\100'
    for i in $(seq 0 319); do printf "\\$(printf %o $((i % 10)))"; done
} > "$dir/data/train-labels-idx1-ubyte"
size=$(wc -c < "$dir/data/train-images-idx3-ubyte")
[ "$size" -eq $((16 + 320 * 784)) ] || { echo "FAIL: the generated images take $size bytes"; exit 1; }
cp "$dir/data/train-images-idx3-ubyte" "$dir/data/t10k-images-idx3-ubyte"
cp "$dir/data/train-labels-idx1-ubyte" "$dir/data/t10k-labels-idx1-ubyte"
gzip "$dir"/data/*

failed=0
fail() { echo "FAIL $*"; failed=1; }
. "$(dirname "$0")/kill_after_save.sh"
"$cnn" "$dir/data" "$dir/whole/run.safetensors" > "$dir/whole.out" 2>&1 || fail "the whole run:"
cat "$dir/whole.out"

"$cnn" "$dir/data" "$dir/killed/run.safetensors" > "$dir/killed.out" 2>&1 &
kill_after_save $! "$dir/killed/run.safetensors"
echo "killed after:"
cat "$dir/killed.out"
"$cnn" "$dir/data" "$dir/killed/run.safetensors" > "$dir/resumed.out" 2>&1 || fail "the resumed run:"
echo "run again:"
cat "$dir/resumed.out"
! grep -q '^epoch 1:' "$dir/resumed.out" || fail "the second run started over instead of resuming"
for file in run.safetensors run.safetensors.best; do
    if [ ! -f "$dir/whole/$file" ]; then
        fail "the whole run wrote no $file"
    elif cmp "$dir/whole/$file" "$dir/killed/$file"; then
        echo "ok $file: byte for byte the uninterrupted run's"
    else
        fail "$file differs from the uninterrupted run's"
    fi
done
exit $failed
