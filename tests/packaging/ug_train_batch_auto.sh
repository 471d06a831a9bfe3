#!/bin/sh
# ug-train --batch-size auto under UG_MEMORY_LIMIT: the batch it picks fits
# the limit by the plan it prints (with its 5% kept free), twice that batch
# does not, and training with it runs without running out of memory.
# 2048 blank 28x28 images. Usage: ug_train_batch_auto.sh UG_TRAIN
set -u
ug_train=$1
dir=$(mktemp -d "${TMPDIR:-/tmp}/ug-batch-auto.XXXXXX")
trap 'rm -rf "$dir"' EXIT
{ printf '\0\0\10\3\0\0\10\0\0\0\0\34\0\0\0\34'; head -c 1605632 /dev/zero; } > "$dir/images.idx"
{ printf '\0\0\10\1\0\0\10\0'; head -c 2048 /dev/zero; } > "$dir/labels.idx"
out=$(UG_MEMORY_LIMIT=32M "$ug_train" --quiet --epochs 1 --device cpu --batch-size auto --hidden 2048 \
    --no-standardize --train-images "$dir/images.idx" --train-labels "$dir/labels.idx" \
    --test-images "$dir/images.idx" --test-labels "$dir/labels.idx" 2>&1) || { echo "$out"; exit 1; }
printf '%s\n' "$out"
line=$(printf '%s\n' "$out" | grep '^batch size auto: ')
# batch size auto: B: the plan needs N MiB (+5% kept free) beside U MiB in use, limit L MiB; 2B would need X MiB
printf '%s\n' "$line" | awk '{
    batch = $4 + 0; need = $8; used = $14; limit = $19; next_need = $24
    if (batch < 1 || batch >= 2048) { print "FAIL: batch " batch " is not below the data set size"; exit 1 }
    if (used + need * 1.05 > limit + 0.02) { print "FAIL: the chosen batch does not fit the limit"; exit 1 }
    if (next_need == "" || used + next_need * 1.05 <= limit - 0.02) { print "FAIL: twice the batch would fit too"; exit 1 }
    print "ok: batch " batch " fits, " 2 * batch " would need " next_need " MiB beside " used " MiB, limit " limit " MiB"
}' || exit 1
printf '%s\n' "$out" | grep -q '^epoch 1: ' || { echo "FAIL: no epoch trained"; exit 1; }
