#!/bin/sh
# ug-train --profile and ug-bench --trace write traces that the independent
# checker (check_trace.py) accepts: well-formed, nested, kernels inside
# their steps, their device time never more than 15% over their steps'
# own spans (ug-train's steps also load the batch and compute the
# accuracy), and ug-bench's table of the recorded launches equal to the
# trace's kernels within 1%: work counted twice fails. Both compare
# figures of one recording: a busy machine stretches the steps and the
# kernels in them alike (against ug-bench's step timed apart, a loaded CI
# machine once put the launches at 115% of it). How close below the spans
# they come is ug-bench's figure, not this test's (--at-most): on a busy
# machine the host is descheduled inside the steps, and the launches were
# 47% of the step once. Every device's track carries the memory pool's
# counters, and a transfer's wait in its queue is apart from its span. A
# trace spoilt on purpose must fail it.
# 4096 generated images (make_idx.sh); ug-train at batch 256, so that its
# steps' own host work (taking the batch, the accuracy), which no launch
# accounts for, stays a small part of a step however fast the device is
# (at batch 64 the CPU's MLP step is 0.3 ms, and that work a sixth of it).
# On a GPU, UG_TRACE_GAP_US (check_trace.py --gap-us) is the gap between two
# queued kernels that counts as the device's (tools/gpu/test.sh sets it),
# and the device's waits for the host to issue its next kernel count as
# the host's (--host-waits): NVIDIA's OpenCL takes the host longer to issue
# a kernel than an H100 takes to run most of the MLP's, so its device idles
# for a third of the step, which the launches' correlation accounts for.
# Under the sanitizers (UG_TRACE_SANITIZED, set by their builds' tests) the
# instrumented host issues kernels slower than the device runs them, so the
# device idles inside the steps (ug-train's launches came to 75% of its
# steps' spans once): there the traces' structure is checked as ever, and
# their timings only within 50%, which a double count still fails. The
# checker's own tests below keep their tolerances.
# Usage: profile_trace.sh UG_TRAIN UG_BENCH CHECK_TRACE DEVICE
set -u
train=$1 bench=$2 checker=$3 device=$4
gap="--gap-us ${UG_TRACE_GAP_US:-0}${UG_TRACE_GAP_US:+ --host-waits}"
tolerance=0.15
if [ -n "${UG_TRACE_SANITIZED:-}" ]; then
    tolerance=0.5
fi
dir=$(mktemp -d "${TMPDIR:-/tmp}/ug-profile.XXXXXX")
trap 'rm -rf "$dir"' EXIT
failed=0
fail() { echo "FAIL $*"; failed=1; }

sh "$(dirname "$0")/make_idx.sh" "$dir" 4096 || exit 1

"$train" --device "$device" --data "$dir" --epochs 1 --batch-size 256 --quiet --profile "$dir/train.json" \
    --profile-steps 10 \
    > "$dir/train.out" 2>&1 || fail "ug-train --profile:"
cat "$dir/train.out"
# The line is broken to fit 80 columns: read it with its breaks as spaces.
tr -s '\n ' ' ' < "$dir/train.out" | grep -q "profile: steps 6-15 on $device written to $dir/train.json" ||
    fail "ug-train did not report the profile of steps 6-15"
grep -q "^fc1/matmul+add+relu " "$dir/train.out" || fail "the table has no fc1/matmul+add+relu row"
# Against its own steps' spans, which also hold the profiler's own work
# between launches (about 1 us each, 45 a step).
python3 "$checker" "$dir/train.json" --tolerance $tolerance --at-most $gap || fail "ug-train's trace"

# At batch 256, so that the device and not the host's issuing sets the
# step's pace: where a launch costs the host 40 us (POCL on some machines),
# batch 64's smallest kernels wait for the host, and the device idles for
# about a tenth of the step, which no launch accounts for.
"$bench" train-mlp --device "$device" --batch 256 --seconds 1 --no-epoch --no-modes \
    --trace "$dir/bench.json" --csv "$dir/bench.csv" > "$dir/bench.out" 2>&1 || fail "ug-bench --trace:"
cat "$dir/bench.out"
# ug-bench's table of the launches it recorded, which the trace's kernels
# must add up to.
launches_ms=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "traced_launches_ms") c = i }
                       NR == 2 { print $c }' "$dir/bench.csv")
python3 "$checker" "$dir/bench.json" --launches-ms "${launches_ms:-0}" --tolerance $tolerance --at-most $gap \
    > "$dir/bench_check.out" 2>&1 || fail "ug-bench's trace"
cat "$dir/bench_check.out"

# The checker catches what it looks for: a kernel moved out of its step,
# a thread left unnamed, a flow unfinished, the pool's counters left out,
# and each step's first kernel written twice (inside itself, so it still
# nests), which the table's figure does not count.
python3 - "$dir/bench.json" "$dir" <<'PY'
import json, sys
trace = json.load(open(sys.argv[1]))
events = trace["traceEvents"]
kernel = next(e for e in events if e.get("cat") == "kernel")
kernel["ts"] += 10.0 ** 7
json.dump(trace, open(sys.argv[2] + "/outside.json", "w"))
kernel["ts"] -= 10.0 ** 7
trace["traceEvents"] = [e for e in events if e.get("name") != "thread_name"]
json.dump(trace, open(sys.argv[2] + "/unnamed.json", "w"))
first = next(e["id"] for e in events if e.get("ph") == "f")
trace["traceEvents"] = [e for e in events if e.get("ph") != "f" or e["id"] != first]
json.dump(trace, open(sys.argv[2] + "/unfinished.json", "w"))
trace["traceEvents"] = [e for e in events if e.get("ph") != "C"]
json.dump(trace, open(sys.argv[2] + "/uncounted.json", "w"))
steps = [e for e in events if e.get("cat") == "range" and e["name"] == "step"]
kernels = [e for e in events if e.get("cat") == "kernel"]
firsts = [min((k for k in kernels if k["pid"] == s["pid"] and s["ts"] <= k["ts"] <= s["ts"] + s["dur"]),
              key=lambda k: k["ts"], default=None) for s in steps]
trace["traceEvents"] = events + [dict(k) for k in firsts if k is not None]
json.dump(trace, open(sys.argv[2] + "/twice.json", "w"))
PY
python3 "$checker" "$dir/outside.json" > "$dir/check.out" && fail "a kernel outside its step passed"
grep -q "is in no step" "$dir/check.out" || fail "the kernel outside its step was not named: $(cat "$dir/check.out")"
python3 "$checker" "$dir/unnamed.json" > "$dir/check.out" && fail "unnamed threads passed"
grep -q "has no thread_name" "$dir/check.out" || fail "the unnamed thread was not reported"
python3 "$checker" "$dir/unfinished.json" > "$dir/check.out" && fail "a flow without its finish passed"
grep -q "flow [0-9]* has 1 starts and 0 finishes" "$dir/check.out" || fail "the unfinished flow was not named"
python3 "$checker" "$dir/uncounted.json" > "$dir/check.out" && fail "a trace without memory counters passed"
grep -q "has kernels but no pool memory counters" "$dir/check.out" || fail "the missing counters were not named"
python3 "$checker" "$dir/twice.json" --launches-ms "${launches_ms:-1}" --at-most > "$dir/check.out" &&
    fail "kernels written twice passed"
grep -q "the profiler's table" "$dir/check.out" || fail "the kernels written twice were not named"
python3 "$checker" "$dir/bench.json" --launches-ms "$(awk "BEGIN { print 2 * ${launches_ms:-1} }")" --at-most \
    > "$dir/check.out" && fail "a table counting the launches twice passed"
grep -q "the profiler's table" "$dir/check.out" || fail "the table counting twice was not named"
python3 "$checker" "$dir/bench.json" --launches-ms 0 > "$dir/check.out" 2>&1 && fail "a table of 0 ms passed"
grep -q "not a positive number" "$dir/check.out" || fail "the table of 0 ms was not refused: $(cat "$dir/check.out")"

# --gap-us: a GPU's step of 10 kernels of 8 us, 2 us apart, spans 98 us;
# the short gaps are the device's, and gaps of 5 us are not. An upload on
# another stream during the step counts once with the kernels it overlaps.
# --host-waits: with gaps of 5 us, each kernel's launch on the host ending
# as the kernel starts explains the gaps; launches ending 4 us before
# their kernels leave 4 of each 5 us unexplained.
python3 - "$dir" <<'PY'
import json, sys
for gap, late in ((2, 0), (5, 0), (5, -4)):
    events = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "host"}},
              {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "thread 1"}},
              {"ph": "M", "name": "process_name", "pid": 2, "tid": 0, "args": {"name": "gpu"}},
              {"ph": "M", "name": "thread_name", "pid": 2, "tid": 0, "args": {"name": "stream"}},
              {"ph": "M", "name": "thread_name", "pid": 2, "tid": 1, "args": {"name": "uploads"}},
              {"ph": "C", "name": "pool MiB", "pid": 2, "tid": 0, "ts": 0, "args": {"in use": 1.0, "cached": 0.0}},
              {"ph": "X", "cat": "range", "name": "step", "pid": 2, "tid": 0, "ts": 0, "dur": 8 + 9 * (8 + gap)},
              {"ph": "X", "cat": "transfer", "name": "upload", "pid": 2, "tid": 1, "ts": 1, "dur": 30}]
    for i in range(10):
        start = i * (8 + gap)
        events += [{"ph": "X", "cat": "kernel", "name": "k%d" % i, "pid": 2, "tid": 0, "ts": start, "dur": 8,
                    "args": {"correlation": i + 1}},
                   {"ph": "X", "cat": "launch", "name": "k%d" % i, "pid": 1, "tid": 1, "ts": max(0, start - 3 + late),
                    "dur": 3, "args": {"correlation": i + 1}}]
    json.dump({"traceEvents": events}, open("%s/gaps%d%s.json" % (sys.argv[1], gap, "late" if late else ""), "w"))
PY
python3 "$checker" "$dir/gaps2.json" > /dev/null && fail "kernels covering 82% of their step passed"
python3 "$checker" "$dir/gaps2.json" --gap-us 3 > "$dir/check.out" ||
    fail "gaps of 2 us with --gap-us 3 failed: $(cat "$dir/check.out")"
python3 "$checker" "$dir/gaps5.json" --gap-us 3 > /dev/null && fail "gaps of 5 us with --gap-us 3 passed"
python3 "$checker" "$dir/gaps5.json" --gap-us 3 --host-waits > "$dir/check.out" ||
    fail "gaps of 5 us waiting for the host failed: $(cat "$dir/check.out")"
python3 "$checker" "$dir/gaps5late.json" --gap-us 3 --host-waits > /dev/null &&
    fail "gaps of 5 us that the host explains 1 us of passed"

# A transfer's wait in its queue: from its queuing to its start, which a
# wait ending elsewhere or starting before the queuing fails.
python3 - "$dir/gaps2.json" "$dir" <<'PY'
import json, sys
trace = json.load(open(sys.argv[1]))
events = trace["traceEvents"]
events += [{"ph": "M", "name": "thread_name", "pid": 2, "tid": 101, "args": {"name": "queued"}},
           {"ph": "X", "cat": "transfer", "name": "copy", "pid": 2, "tid": 1, "ts": 40, "dur": 5,
            "args": {"correlation": 99, "queued": 10}},
           {"ph": "X", "cat": "queued", "name": "copy", "pid": 2, "tid": 101, "ts": 10, "dur": 30,
            "args": {"correlation": 99}}]
json.dump(trace, open(sys.argv[2] + "/waited.json", "w"))
events[-1]["dur"] = 20
json.dump(trace, open(sys.argv[2] + "/wait_short.json", "w"))
events[-1].update(ts=5, dur=35)
json.dump(trace, open(sys.argv[2] + "/wait_early.json", "w"))
PY
python3 "$checker" "$dir/waited.json" --gap-us 3 > "$dir/check.out" ||
    fail "a transfer's wait in its queue failed: $(cat "$dir/check.out")"
python3 "$checker" "$dir/wait_short.json" --gap-us 3 > "$dir/check.out" && fail "a wait ending before its transfer passed"
grep -q "the transfer starts at" "$dir/check.out" || fail "the short wait was not named: $(cat "$dir/check.out")"
python3 "$checker" "$dir/wait_early.json" --gap-us 3 > "$dir/check.out" && fail "a wait before its queuing passed"
grep -q "before the transfer was queued" "$dir/check.out" || fail "the early wait was not named"
exit $failed
