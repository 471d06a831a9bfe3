#!/bin/sh
# ug-train --plot and ug-plot draw valid PNG images (check_png.py), the
# second from the first's CSV log; a log that is not one is refused with a
# message and no picture. A one-epoch log (every accuracy at one step) and
# a log whose steps mostly have no loss (a trainer's log_every) draw with
# nothing from gnuplot on standard error. 1024 generated images
# (make_idx.sh).
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

"$train" --device cpu --data "$dir" --epochs 1 --quiet --csv "$dir/one.csv" --plot "$dir/one_train.png" \
    > "$dir/one_train.out" 2> "$dir/one_train.err" || fail "ug-train --plot, one epoch: $(cat "$dir/one_train.err")"
[ ! -s "$dir/one_train.err" ] || fail "ug-train --plot of one epoch wrote to stderr: $(cat "$dir/one_train.err")"
"$plot" "$dir/one.csv" --out "$dir/one.png" 2> "$dir/one.err" || fail "ug-plot, one epoch: $(cat "$dir/one.err")"
[ ! -s "$dir/one.err" ] || fail "ug-plot of one epoch wrote to stderr: $(cat "$dir/one.err")"
# Every third step's loss read, the others NaN as C prints it.
awk -F, -v OFS=, 'NR > 1 && $1 == "step" && $3 % 3 { $4 = ($3 % 2 ? "nan" : "-nan") } { print }' \
    "$dir/log.csv" > "$dir/every3.csv"
grep -q ',nan,' "$dir/every3.csv" || fail "the log_every log has no NaN loss"
"$plot" "$dir/every3.csv" 2> "$dir/every3.err" || fail "ug-plot, NaN losses: $(cat "$dir/every3.err")"
[ ! -s "$dir/every3.err" ] || fail "ug-plot of NaN losses wrote to stderr: $(cat "$dir/every3.err")"
python3 "$checker" "$dir/one_train.png" "$dir/one.png" "$dir/every3.png" || fail "the one-epoch and NaN pictures"

"$plot" "$dir/train-labels-idx1-ubyte.gz" --out "$dir/none.png" > "$dir/refused.out" 2>&1 &&
    fail "ug-plot drew a file that is not a log"
grep -q "is not a ug-train --csv log" "$dir/refused.out" || fail "no reason given: $(cat "$dir/refused.out")"
[ ! -e "$dir/none.png" ] || fail "a refused plot left a picture"
exit $failed
