#!/bin/sh
# ug-train on damaged data stops with a message naming the problem: a label
# outside the classes, a NaN pixel (found by the data set statistics), and
# the same NaN reaching the graph when inputs are not standardised (found
# by the graph's numeric checks). Usage: ug_train_bad_data.sh UG_TRAIN
set -u
ug_train=$1
dir=$(mktemp -d "${TMPDIR:-/tmp}/ug-bad-data.XXXXXX")
trap 'rm -rf "$dir"' EXIT
# IDX files: 2 images of 2x2 (u8, and f32 with one NaN), labels (u8).
printf '\0\0\10\3\0\0\0\2\0\0\0\2\0\0\0\2\1\2\3\4\5\6\7\10' > "$dir/u8.idx"
printf '\0\0\15\3\0\0\0\2\0\0\0\2\0\0\0\2\77\200\0\0\177\300\0\0\77\200\0\0\77\200\0\0\77\200\0\0\77\200\0\0\77\200\0\0\77\200\0\0' > "$dir/nan.idx"
printf '\0\0\10\1\0\0\0\2\0\377' > "$dir/bad-labels.idx"
printf '\0\0\10\1\0\0\0\2\0\1' > "$dir/labels.idx"

failed=0
expect() { # expect NAME PATTERN ARGS...: ug-train must fail and print PATTERN
    name=$1 pattern=$2
    shift 2
    if out=$("$ug_train" --quiet --epochs 1 --device cpu --batch-size 2 "$@" 2>&1); then
        echo "FAIL $name: ug-train succeeded"; failed=1
    elif ! printf '%s\n' "$out" | grep -q -- "$pattern"; then
        echo "FAIL $name: no \"$pattern\" in:"; printf '%s\n' "$out"; failed=1
    else
        echo "ok $name: $(printf '%s\n' "$out" | grep -- "$pattern")"
    fi
}
expect "bad label" "sample 1 has label 255, outside the 10 classes" \
    --train-images "$dir/u8.idx" --train-labels "$dir/bad-labels.idx" \
    --test-images "$dir/u8.idx" --test-labels "$dir/labels.idx"
expect "NaN pixel" "sample 0, feature 1 is nan" \
    --train-images "$dir/nan.idx" --train-labels "$dir/labels.idx" \
    --test-images "$dir/u8.idx" --test-labels "$dir/labels.idx"
expect "NaN pixel, not standardised" "NaN or infinity appeared in the logits of cross_entropy" \
    --no-standardize --train-images "$dir/nan.idx" --train-labels "$dir/labels.idx" \
    --test-images "$dir/u8.idx" --test-labels "$dir/labels.idx"
exit $failed
