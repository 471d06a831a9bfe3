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
exit $failed
