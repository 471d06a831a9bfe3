#!/bin/sh
# ug-train's report and CSV log: the header counts "1 epoch" in the
# singular; the log's header has every column; global_step runs on across
# epochs (and across a resume given the log again, which appends); each epoch row holds the
# training and validation accuracy that the epoch's line prints. 10 samples
# (2 held out) in batches of 4. Usage: ug_train_report.sh UG_TRAIN
set -u
ug_train=$1
dir=$(mktemp -d "${TMPDIR:-/tmp}/ug-report.XXXXXX")
trap 'rm -rf "$dir"' EXIT
printf '\0\0\10\3\0\0\0\12\0\0\0\2\0\0\0\2' > "$dir/images.idx"
printf '\1\2\3\4\5\6\7\10\11\12\13\14\15\16\17\20\21\22\23\24\25\26\27\30\31\32\33\34\35\36\37\40\41\42\43\44\45\46\47\50' >> "$dir/images.idx"
printf '\0\0\10\1\0\0\0\12\0\1\2\3\0\1\2\3\0\1' > "$dir/labels.idx"
data="--train-images $dir/images.idx --train-labels $dir/labels.idx --test-images $dir/images.idx --test-labels $dir/labels.idx"
failed=0
fail() { echo "FAIL $*"; failed=1; }
# shellcheck disable=SC2086
out=$("$ug_train" --quiet --epochs 1 --device cpu --batch-size 4 --val-split 0.2 --csv "$dir/log.csv" \
    --save "$dir/run.safetensors" $data 2>&1) || { echo "$out"; exit 1; }
# shellcheck disable=SC2086
out2=$("$ug_train" --quiet --resume "$dir/run.safetensors" --epochs 2 --csv "$dir/log.csv" 2>&1) || { echo "$out2"; exit 1; }
printf '%s\n%s\n' "$out" "$out2"
printf '%s\n' "$out" | grep -q ', 1 epoch, ' || fail "the header does not say \"1 epoch\""
printf '%s\n' "$out2" | grep -q 'epoch 2, 2 updates done' || fail "the resume line does not say where the run stands"
want="kind,epoch,step,train_loss,val_loss,test_loss,test_accuracy,lr,samples_per_s,global_step,train_accuracy,val_accuracy"
[ "$(head -n 1 "$dir/log.csv")" = "$want" ] || fail "the log's header is $(head -n 1 "$dir/log.csv")"
[ "$(grep -c '^kind' "$dir/log.csv")" = 1 ] || fail "the resumed run wrote a second header"
# 8 training samples: 2 batches an epoch, global steps 1 2 | 3 4.
steps=$(awk -F, '$1 == "step" { printf "%s:%s:%s ", $2, $3, $10 }' "$dir/log.csv")
[ "$steps" = "1:1:1 1:2:2 2:1:3 2:2:4 " ] || fail "epoch:step:global_step of the step rows are $steps"
for epoch in 1 2; do
    row=$(awk -F, -v e=$epoch '$1 == "epoch" && $2 == e' "$dir/log.csv")
    # The epoch's line and the validation line under it.
    line=$(printf '%s\n%s\n' "$out" "$out2" | grep -A 1 "^epoch $epoch: ")
    train=$(printf '%s\n' "$line" | sed -n 's/.*train loss [0-9.]* (accuracy \([0-9.]*\)%).*/\1/p')
    val=$(printf '%s\n' "$line" | sed -n 's/.*validation loss [0-9.]* (accuracy \([0-9.]*\)%).*/\1/p')
    if printf '%s\n' "$row" | awk -F, -v t="$train" -v v="$val" -v e=$epoch '{
        ok = $10 == 2 * e && t != "" && v != "" && sprintf("%.2f", $11) == t && sprintf("%.2f", $12) == v
        exit !ok }'; then
        echo "ok epoch $epoch: $row"
    else
        fail "epoch $epoch: row \"$row\" against the line \"$line\""
    fi
done
exit $failed
