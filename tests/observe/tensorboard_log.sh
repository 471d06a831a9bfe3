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
python3 "$reader" "$events" "$dir/log.csv" || fail "the event file"

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
