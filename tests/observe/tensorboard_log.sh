#!/bin/sh
# ug-train --tensorboard writes an event file that an independent reader
# (read_tfevents.py) reads back with every CRC valid and every scalar equal
# to the CSV log's for its step; a file with a flipped byte must fail it.
# 1024 generated images (make_idx.sh), two epochs with a validation split.
# Usage: tensorboard_log.sh UG_TRAIN READ_TFEVENTS DEVICE
set -u
train=$1 reader=$2 device=$3
dir=$(mktemp -d "${TMPDIR:-/tmp}/ug-tensorboard.XXXXXX")
trap 'rm -rf "$dir"' EXIT
failed=0
fail() { echo "FAIL $*"; failed=1; }
sh "$(dirname "$0")/make_idx.sh" "$dir" 1024 || exit 1

"$train" --device "$device" --data "$dir" --epochs 2 --val-split 0.25 --quiet --csv "$dir/log.csv" \
    --tensorboard "$dir/runs" > "$dir/train.out" 2>&1 || fail "ug-train --tensorboard:"
cat "$dir/train.out"
set -- "$dir"/runs/events.out.tfevents.*
[ $# -eq 1 ] && [ -f "$1" ] || { echo "FAIL no single event file in $dir/runs: $*"; exit 1; }
events=$1
python3 "$reader" "$events" "$dir/log.csv" > "$dir/read.out" || fail "the event file"
cat "$dir/read.out"

# Memory on every epoch, and with f16 the loss scaler's figures.
grep -q "memory/pool_in_use_mib, memory/pool_peak_mib" "$dir/read.out" || fail "no pool memory scalars"
"$train" --device "$device" --data "$dir" --epochs 1 --precision f16 --quiet --csv "$dir/f16.csv" \
    --tensorboard "$dir/f16" > "$dir/f16.out" 2>&1 || fail "ug-train --precision f16 --tensorboard: $(cat "$dir/f16.out")"
python3 "$reader" "$dir"/f16/events.out.tfevents.* "$dir/f16.csv" > "$dir/f16.check" || fail "the f16 event file"
cat "$dir/f16.check"
grep -q "amp/loss_scale, amp/skipped_steps" "$dir/f16.check" || fail "no loss scaler scalars with f16"

# A flipped byte in the middle breaks a CRC; a cut breaks the framing.
python3 - "$events" "$dir" <<'PY'
import sys
blob = bytearray(open(sys.argv[1], "rb").read())
blob[len(blob) // 2] ^= 0x40
open(sys.argv[2] + "/flipped", "wb").write(blob)
open(sys.argv[2] + "/cut", "wb").write(blob[:len(blob) // 3])
PY
python3 "$reader" "$dir/flipped" "$dir/log.csv" > "$dir/check.out" && fail "a flipped byte passed"
grep -q "CRC" "$dir/check.out" || fail "the flipped byte was not reported as a CRC: $(cat "$dir/check.out")"
python3 "$reader" "$dir/cut" "$dir/log.csv" > "$dir/check.out" && fail "a cut file passed"
exit $failed
