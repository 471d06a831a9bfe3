#!/bin/sh
# ug-train --plot and ug-plot draw valid PNG images (check_png.py), the
# second from the first's CSV log; a log that is not one is refused with a
# message and no picture. 1024 generated images (make_idx.sh).
# Usage: plot_png.sh UG_TRAIN UG_PLOT CHECK_PNG
set -u
train=$1 plot=$2 checker=$3
dir=$(mktemp -d "${TMPDIR:-/tmp}/ug-plot.XXXXXX")
trap 'rm -rf "$dir"' EXIT
failed=0
fail() { echo "FAIL $*"; failed=1; }
sh "$(dirname "$0")/make_idx.sh" "$dir" 1024 || exit 1

"$train" --device cpu --data "$dir" --epochs 2 --val-split 0.25 --quiet --csv "$dir/log.csv" \
    --plot "$dir/train.png" > "$dir/train.out" 2>&1 || fail "ug-train --plot:"
cat "$dir/train.out"
! grep -q warning "$dir/train.out" || fail "ug-train warned"
"$plot" "$dir/log.csv" || fail "ug-plot"
python3 "$checker" "$dir/train.png" "$dir/log.png" || fail "the pictures"
ls "$dir" | grep -q '\.tmp\.' && fail "a temporary file was left: $(ls "$dir")"

"$plot" "$dir/train-labels-idx1-ubyte.gz" --out "$dir/none.png" > "$dir/refused.out" 2>&1 &&
    fail "ug-plot drew a file that is not a log"
grep -q "is not a ug-train --csv log" "$dir/refused.out" || fail "no reason given: $(cat "$dir/refused.out")"
[ ! -e "$dir/none.png" ] || fail "a refused plot left a picture"
exit $failed
