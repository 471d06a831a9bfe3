#!/bin/sh
# examples/gpt.c resumes exactly and samples: 20 steps on a text, killed
# with SIGKILL right after its first checkpoint and run again, it ends with
# the checkpoint byte for byte that of an uninterrupted run, and samples
# the same 500 characters. UG_DEVICE picks the device.
# Usage: gpt_resume.sh GPT TEXT
set -u
gpt=$1
text=$2
[ -r "$text" ] || { echo "SKIP: no text at $text"; exit 77; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/ug-gpt-resume.XXXXXX")
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/whole" "$dir/killed"
failed=0
fail() { echo "FAIL $*"; failed=1; }
. "$(dirname "$0")/kill_after_save.sh"
"$gpt" "$text" "$dir/whole/run.safetensors" 20 > "$dir/whole.out" 2>&1 || fail "the whole run:"
cat "$dir/whole.out"

"$gpt" "$text" "$dir/killed/run.safetensors" 20 > "$dir/killed.out" 2>&1 &
kill_after_save $! "$dir/killed/run.safetensors"
echo "killed after:"
cat "$dir/killed.out"
"$gpt" "$text" "$dir/killed/run.safetensors" 20 > "$dir/resumed.out" 2>&1 || fail "the resumed run:"
echo "run again:"
cat "$dir/resumed.out"
! grep -q '^step 6:' "$dir/resumed.out" || fail "the second run started over instead of resuming"
if cmp "$dir/whole/run.safetensors" "$dir/killed/run.safetensors"; then
    echo "ok: the checkpoint is byte for byte the uninterrupted run's"
else
    fail "the checkpoint differs from the uninterrupted run's"
fi
# The samples: everything after the last report line.
sed '1,/^step 20:/d' "$dir/whole.out" > "$dir/whole.txt"
sed '1,/^step 20:/d' "$dir/resumed.out" > "$dir/resumed.txt"
[ "$(wc -c < "$dir/whole.txt")" -gt 400 ] || fail "the whole run sampled no text"
cmp "$dir/whole.txt" "$dir/resumed.txt" || fail "the resumed run sampled other text"
exit $failed
