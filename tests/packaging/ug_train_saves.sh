#!/bin/sh
# ug-train never loses a run's work in silence: --save into a folder that
# cannot take files stops before training; a run whose last save failed
# (its folder removed part way) exits non-zero; SIGHUP (a closed terminal)
# and SIGTERM save and say how to resume, with 128 + the signal as status.
# Tiny IDX files, so no data set is needed. Usage: ug_train_saves.sh UG_TRAIN
set -u
ug_train=$1
dir=$(mktemp -d "${TMPDIR:-/tmp}/ug-saves.XXXXXX")
trap 'rm -rf "$dir"' EXIT
printf '\0\0\10\3\0\0\0\2\0\0\0\2\0\0\0\2\1\2\3\4\5\6\7\10' > "$dir/x.idx"
printf '\0\0\10\1\0\0\0\2\0\1' > "$dir/y.idx"
data="--train-images $dir/x.idx --train-labels $dir/y.idx --test-images $dir/x.idx --test-labels $dir/y.idx"
run() { # run EPOCHS ARGS...: ug-train on the tiny data
    epochs=$1
    shift
    # shellcheck disable=SC2086
    "$ug_train" --device cpu --batch-size 2 --epochs "$epochs" $data "$@"
}
failed=0
fail() { echo "FAIL $*"; failed=1; }

# 1. A folder that does not exist: refused before any training.
if out=$(run 1 --save "$dir/missing/ck.safetensors" 2>&1); then
    fail "missing folder: ug-train succeeded"
elif ! printf '%s\n' "$out" | grep -q "cannot take files.*does not start"; then
    fail "missing folder: no reason in:"; printf '%s\n' "$out"
else
    echo "ok missing folder"
fi

# 2. Saves that start failing after the check at the start (here every
#    checkpoint is larger than the file size limit): the run goes on, warns,
#    and fails at its end, its last save lost.
(
    trap '' XFSZ # write() then fails with EFBIG instead of the process dying
    ulimit -f 16 # 8 KiB: the check's empty file fits, a checkpoint does not
    run 3 --quiet --save "$dir/ck.safetensors" > "$dir/out2" 2>&1
)
status=$?
if [ $status -eq 0 ]; then
    fail "failing saves: exit 0 although no save succeeded"
elif ! grep -q "the last checkpoint could not be saved" "$dir/out2"; then
    fail "failing saves: no message in:"; cat "$dir/out2"
else
    echo "ok failing saves: exit $status"
fi

# 3. SIGHUP and SIGTERM: saved, with the way to resume, and 128 + signal.
for signal in HUP TERM; do
    rm -f "$dir/ck.safetensors"
    # shellcheck disable=SC2086
    "$ug_train" --device cpu --batch-size 2 --epochs 100000 $data --quiet --save "$dir/ck.safetensors" \
        --save-every 1 > "$dir/out3" 2>&1 &
    pid=$!
    for _ in $(seq 1 3000); do
        [ -f "$dir/ck.safetensors" ] && break
        sleep 0.01
    done
    kill -s $signal $pid
    wait $pid
    status=$?
    want=$((128 + $([ $signal = HUP ] && echo 1 || echo 15)))
    if [ $status -ne $want ]; then
        fail "SIG$signal: exit $status, expected $want"; cat "$dir/out3"
    elif ! grep -q "resume with: ug-train --resume $dir/ck.safetensors" "$dir/out3"; then
        fail "SIG$signal: no resume line in:"; cat "$dir/out3"
    else
        echo "ok SIG$signal: exit $status"
    fi
done
# 4. Outputs that a run would replace but must not: a FIFO, and a link to
#    a device (as root, --save /dev/null used to delete /dev/null). Refused
#    before training, each left as it was.
mkfifo "$dir/pipe"
ln -s /dev/null "$dir/null"
for option in save profile plot; do
    for target in "$dir/pipe" "$dir/null"; do
        if out=$(run 1 --quiet --$option "$target" 2>&1); then
            fail "--$option $target: ug-train succeeded"
        elif ! printf '%s\n' "$out" | grep -q "not a regular file"; then
            fail "--$option $target: no reason in:"; printf '%s\n' "$out"
        elif [ ! -p "$dir/pipe" ] || [ ! -L "$dir/null" ] || [ ! -c /dev/null ]; then
            fail "--$option $target: the target was replaced"
        else
            echo "ok --$option $target refused"
        fi
    done
done
# 5. A resume writes only where its own command line says. A run saved
#    with --save, --csv and --tensorboard, its checkpoint copied elsewhere
#    (as one received from someone else): resuming the copy must not touch
#    the saved paths, and says which options it reused and which not.
mkdir "$dir/runs"
run 1 --quiet --save "$dir/a.ck" --csv "$dir/log.csv" --tensorboard "$dir/runs/tb" > /dev/null 2>&1 ||
    fail "the run to resume failed"
cp "$dir/a.ck" "$dir/b.ck"
cp "$dir/a.ck" "$dir/a.before"
cp "$dir/log.csv" "$dir/log.before"
events=$(ls "$dir/runs/tb" | wc -l)
if ! out=$("$ug_train" --quiet --resume "$dir/b.ck" --epochs 2 2>&1); then
    fail "resuming a copy failed:"; printf '%s\n' "$out"
elif ! cmp -s "$dir/a.ck" "$dir/a.before" || ! cmp -s "$dir/log.csv" "$dir/log.before" ||
    [ "$(ls "$dir/runs/tb" | wc -l)" != "$events" ]; then
    fail "resuming a copy wrote to the saved run's files"
elif ! printf '%s\n' "$out" | grep -q "^resuming $dir/b.ck with its saved options: .*--epochs 1" ||
    ! printf '%s\n' "$out" | grep -q "^not reused: --save $dir/a.ck --csv $dir/log.csv --tensorboard $dir/runs/tb"; then
    fail "resuming a copy: the reused options are not listed:"; printf '%s\n' "$out"
else
    echo "ok a copied checkpoint writes nothing of the saved run's"
fi
# Resuming the checkpoint itself keeps saving into it; the log grows only
# when named again, and only a ug-train log is added to.
if ! "$ug_train" --quiet --resume "$dir/a.ck" --epochs 2 --csv "$dir/log.csv" > "$dir/out5" 2>&1; then
    fail "resuming in place failed:"; cat "$dir/out5"
elif cmp -s "$dir/a.ck" "$dir/a.before" || [ "$(grep -c '^epoch,2,' "$dir/log.csv")" != 1 ]; then
    fail "resuming in place: no new checkpoint or no epoch 2 in the log"
else
    echo "ok resuming in place saves to it and appends to the log named again"
fi
echo "my notes" > "$dir/notes.txt"
if "$ug_train" --quiet --resume "$dir/a.ck" --epochs 3 --csv "$dir/notes.txt" > "$dir/out6" 2>&1 ||
    [ "$(cat "$dir/notes.txt")" != "my notes" ] || ! grep -q "not the log's header" "$dir/out6"; then
    fail "a resume appended to a file that is not a log:"; cat "$dir/out6"
else
    echo "ok a resume appends to no other file"
fi
exit $failed
