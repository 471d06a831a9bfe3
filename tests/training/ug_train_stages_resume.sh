#!/bin/sh
# ug-train --stages cpu,opencl:0 resumes exactly: killed with SIGKILL right
# after a checkpoint in the middle of its first epoch (--save-every 20
# updates) and resumed, it ends with the uninterrupted run's epoch lines
# (the last stage's running sums are in the checkpoint) and every tensor of
# its final checkpoint, which holds the whole model, bit for bit; the same
# checkpoint resumed with the stages' devices swapped ends within float
# rounding of it (check_checkpoints.py compares). 4096 generated images.
# Usage: ug_train_stages_resume.sh UG_TRAIN
set -u
train=$1
dir=$(mktemp -d "${TMPDIR:-/tmp}/ug-stages-resume.XXXXXX")
trap 'rm -rf "$dir"' EXIT
failed=0
fail() { echo "FAIL $*"; failed=1; }
sh "$(dirname "$0")/../observe/make_idx.sh" "$dir" 4096 || exit 1
. "$(dirname "$0")/../examples/kill_after_save.sh"
mkdir "$dir/whole" "$dir/killed"
set -- --stages cpu,opencl:0 --data "$dir" --epochs 2 --batch-size 64 --dropout 0.1 --quiet --save-every 20
"$train" "$@" --save "$dir/whole/run.safetensors" > "$dir/whole.out" 2>&1 || fail "the whole run:"
cat "$dir/whole.out"
"$train" "$@" --save "$dir/killed/run.safetensors" > "$dir/killed.out" 2>&1 &
kill_after_save $! "$dir/killed/run.safetensors"
cp "$dir/killed/run.safetensors" "$dir/swapped.safetensors"
"$train" --resume "$dir/killed/run.safetensors" --quiet > "$dir/resumed.out" 2>&1 || fail "the resumed run:"
cat "$dir/resumed.out"
grep -q "^resumed from" "$dir/resumed.out" || fail "the second run did not resume"
[ "$(grep '^epoch 2:' "$dir/resumed.out" | sed 's/ in .*//')" = "$(grep '^epoch 2:' "$dir/whole.out" | sed 's/ in .*//')" ] ||
    fail "the resumed run's epoch 2 differs from the uninterrupted run's"
python3 "$(dirname "$0")/check_checkpoints.py" "$dir/whole/run.safetensors" "$dir/killed/run.safetensors" 0 ||
    fail "the resumed run's checkpoint differs from the uninterrupted run's"
# The same checkpoint on the stages' devices swapped.
"$train" --resume "$dir/swapped.safetensors" --stages opencl:0,cpu --save "$dir/swapped.safetensors" --quiet \
    > "$dir/swapped.out" 2>&1 || fail "resumed with the stages swapped:"
cat "$dir/swapped.out"
python3 "$(dirname "$0")/check_checkpoints.py" "$dir/whole/run.safetensors" "$dir/swapped.safetensors" 1e-3 ||
    fail "resumed with the stages swapped, the checkpoint is not within rounding of the uninterrupted run's"
exit $failed
