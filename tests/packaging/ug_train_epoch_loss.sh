#!/bin/sh
# ug-train's per-epoch train loss is the mean over the epoch's samples (the
# sum kept on the device): it must equal the mean of the CSV's per-step
# losses weighted by each step's rows. 10 samples in batches of 4: steps
# of 4, 4 and 2 rows. Usage: ug_train_epoch_loss.sh UG_TRAIN
set -u
ug_train=$1
dir=$(mktemp -d "${TMPDIR:-/tmp}/ug-epoch-loss.XXXXXX")
trap 'rm -rf "$dir"' EXIT
printf '\0\0\10\3\0\0\0\12\0\0\0\2\0\0\0\2' > "$dir/images.idx"
printf '\1\2\3\4\5\6\7\10\11\12\13\14\15\16\17\20\21\22\23\24\25\26\27\30\31\32\33\34\35\36\37\40\41\42\43\44\45\46\47\50' >> "$dir/images.idx"
printf '\0\0\10\1\0\0\0\12\0\1\2\3\0\1\2\3\0\1' > "$dir/labels.idx"
out=$("$ug_train" --quiet --epochs 2 --device cpu --batch-size 4 --lr 0.01 --csv "$dir/log.csv" \
    --train-images "$dir/images.idx" --train-labels "$dir/labels.idx" \
    --test-images "$dir/images.idx" --test-labels "$dir/labels.idx") || { echo "$out"; exit 1; }
printf '%s\n' "$out"
failed=0
for epoch in 1 2; do
    want=$(awk -F, -v e="$epoch" '$1 == "step" && $2 == e { rows = ($3 <= 2) ? 4 : 2; s += rows * $4; n += rows }
        END { printf "%.6f", s / n }' "$dir/log.csv")
    got=$(printf '%s\n' "$out" | sed -n "s/^epoch $epoch: train loss \([0-9.]*\)[ ,].*/\1/p")
    if awk -v w="$want" -v g="$got" 'BEGIN { d = w - g; exit !(g != "" && d < 6e-5 && d > -6e-5) }'; then
        echo "ok epoch $epoch: train loss $got, weighted mean of the steps $want"
    else
        echo "FAIL epoch $epoch: train loss '$got', weighted mean of the steps $want"; failed=1
    fi
done
exit $failed
