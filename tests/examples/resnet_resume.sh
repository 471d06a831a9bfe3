#!/bin/sh
# examples/resnet.c on CIFAR-10's binary files resumes exactly: killed with
# SIGKILL right after its first checkpoint and run again, it ends with the
# checkpoint (weights, optimizer state, data order, augmentation's draws,
# random state) byte for byte that of an uninterrupted run. Generated
# files in CIFAR-10's format: five training files of 16 images and a test
# file of 16, pixels in a pattern of the label. UG_DEVICE picks the device.
# Usage: resnet_resume.sh RESNET
set -u
resnet=$1
dir=$(mktemp -d "${TMPDIR:-/tmp}/ug-resnet-resume.XXXXXX")
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/data" "$dir/whole" "$dir/killed"
# Records of a label byte and 3072 pixel bytes (1..250).
records() {
    LC_ALL=C awk -v first="$1" 'BEGIN { for (i = first; i < first + 16; i++) {
        printf "%c", i % 10
        for (j = 0; j < 3072; j++) printf "%c", 1 + (j * (i % 10 + 1) + 7 * i) % 250 } }'
}
for b in 1 2 3 4 5; do records $((b * 16)) > "$dir/data/data_batch_$b.bin"; done
records 0 > "$dir/data/test_batch.bin"
size=$(wc -c < "$dir/data/test_batch.bin")
[ "$size" -eq $((16 * 3073)) ] || { echo "FAIL: a generated file takes $size bytes"; exit 1; }

failed=0
fail() { echo "FAIL $*"; failed=1; }
. "$(dirname "$0")/kill_after_save.sh"
"$resnet" "$dir/data" "$dir/whole/run.safetensors" 2 > "$dir/whole.out" 2>&1 || fail "the whole run:"
cat "$dir/whole.out"
"$resnet" "$dir/data" "$dir/killed/run.safetensors" 2 > "$dir/killed.out" 2>&1 &
kill_after_save $! "$dir/killed/run.safetensors"
echo "killed after:"
cat "$dir/killed.out"
"$resnet" "$dir/data" "$dir/killed/run.safetensors" 2 > "$dir/resumed.out" 2>&1 || fail "the resumed run:"
echo "run again:"
cat "$dir/resumed.out"
grep -q '^epoch 2:' "$dir/whole.out" || fail "the whole run did not report its second epoch"
! grep -q '^epoch 1:' "$dir/resumed.out" || fail "the second run started over instead of resuming"
if cmp "$dir/whole/run.safetensors" "$dir/killed/run.safetensors"; then
    echo "ok: the checkpoint is byte for byte the uninterrupted run's"
else
    fail "the checkpoint differs from the uninterrupted run's"
fi
exit $failed
