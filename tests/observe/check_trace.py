#!/usr/bin/env python3
"""Checks a Chrome trace written by unigrad's profiler, from the Trace Event
Format's specification (the JSON Object Format: an object whose
"traceEvents" holds the events), with Python's standard library only.

Every event must be well-formed for its phase: complete events ("X") carry
a name, a category, pid and tid, and non-negative "ts" and "dur" in
microseconds; counters ("C") a name, pid, ts and numeric args; metadata
("M") process_name or thread_name with args.name. Every process and
thread used is named by metadata. On each thread the complete events nest
(two either do not overlap or one holds the other), as viewers need.

Flow events ("s" and "f") join a launch on the host to its span on the
device: each carries an id, and each id has one of each, the "f" bound to
the kernel ("bp": "e") whose args.correlation the launch's shares.

Every device process with kernels carries the memory pool's counters
("C" events "pool MiB" with "in use" and "cached"). A transfer that waited
in its queue has the wait apart ("queued", on a track of its own): it ends
where the transfer of its args.correlation starts, and starts no earlier
than the transfer was queued (its args.queued), so the transfer's own span
is its time only.

Device processes (every process but the host's) must hold "step" ranges
with every kernel inside one on its thread; the time within each step that
the device was busy (its kernels and transfers on every stream, work that
overlaps counted once) must come within --tolerance of the step: its median
against the median of the steps' own spans on the device.
--launches-ms MS compares the trace with the profiler's own table of the
same recording (ug-bench's traced_launches_ms, the device time of every
op over the steps recorded): the kernels and transfers inside the steps,
each counted as written, must add up to MS a step within 1%. Both read
one recording, so a busy machine moves them together; an event written
twice, or one the table counts twice, does not.
A GPU leaves a gap of a microsecond or two between two kernels even when
the second is queued (an H100's, with the profiler's events between them,
is about 1.3 us): --gap-us G counts each gap between a step's kernels (and
before its first) up to G as the device's, so that a step of 35 small kernels is not a fifth
short; longer gaps still count against it. 0 (the default) for the CPU
and POCL, whose kernels follow one another on the host.
A device whose queue runs apart from the host (a GPU) can also idle
because the host has not yet issued its next work: --host-waits counts
each gap up to the end of the next work's launch on the host (joined by
args.correlation) as the host's, and reports that share; a gap the host
does not explain still counts against the step.

--at-most checks the upper side alone: launches that come to more than the
step by over the tolerance (work counted twice) fail, fewer are reported.
On a loaded machine the host is descheduled inside the steps, so the
lower side is a benchmark's figure (ug-bench --trace), not a test's.

usage: check_trace.py TRACE [--launches-ms MS] [--tolerance 0.10] [--at-most] [--gap-us G] [--host-waits]
"""
import argparse
import json
import math
import statistics
import sys

SLACK_US = 0.002  # the writer's nanosecond rounding


def number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def problems_of_event(e):
    if not isinstance(e, dict):
        return ["an event is not an object"]
    ph = e.get("ph")
    where = "event %r" % (e.get("name"),)
    out = []
    if not isinstance(e.get("pid"), int) or isinstance(e.get("pid"), bool):
        out.append(where + ": pid is not an integer")
    if ph == "X":
        if not isinstance(e.get("name"), str) or not e["name"]:
            out.append(where + ": no name")
        if not isinstance(e.get("cat"), str):
            out.append(where + ": no category")
        if not isinstance(e.get("tid"), int):
            out.append(where + ": tid is not an integer")
        for key in ("ts", "dur"):
            if not number(e.get(key)) or e[key] < 0:
                out.append("%s: %s is %r, not a non-negative number" % (where, key, e.get(key)))
        if "args" in e and not isinstance(e["args"], dict):
            out.append(where + ": args is not an object")
    elif ph == "C":
        if not isinstance(e.get("name"), str):
            out.append(where + ": a counter without a name")
        if not number(e.get("ts")) or e["ts"] < 0:
            out.append(where + ": counter ts is not a non-negative number")
        args = e.get("args")
        if not isinstance(args, dict) or not args or not all(number(v) for v in args.values()):
            out.append(where + ": counter args are not numbers")
    elif ph in ("s", "f"):
        if not isinstance(e.get("id"), (int, str)) or isinstance(e.get("id"), bool):
            out.append(where + ": a flow event without an id")
        if not isinstance(e.get("tid"), int):
            out.append(where + ": tid is not an integer")
        if not number(e.get("ts")) or e["ts"] < 0:
            out.append(where + ": flow ts is not a non-negative number")
    elif ph == "M":
        if e.get("name") not in ("process_name", "thread_name", "process_sort_index", "thread_sort_index"):
            out.append(where + ": unknown metadata")
        elif e["name"].endswith("_name") and not isinstance((e.get("args") or {}).get("name"), str):
            out.append(where + ": metadata without args.name")
    else:
        out.append("%s: phase %r is not one the profiler writes" % (where, ph))
    return out


def nesting_problems(events):
    """Events of one thread: each pair disjoint or one inside the other."""
    out = []
    ordered = sorted(events, key=lambda e: (e["ts"], -e["dur"]))
    open_ends = []  # ends of the events enclosing the current one
    for e in ordered:
        start, end = e["ts"], e["ts"] + e["dur"]
        while open_ends and open_ends[-1][0] <= start + SLACK_US:
            open_ends.pop()
        if open_ends and end > open_ends[-1][0] + SLACK_US:
            out.append("%r (%.3f..%.3f us) overlaps the end of %r at %.3f without nesting"
                       % (e["name"], start, end, open_ends[-1][1], open_ends[-1][0]))
        open_ends.append((end, e["name"]))
    return out


def check(trace, launches_ms, tolerance, gap_us=0.0, host_waits=False, at_most=False):
    problems = []
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        return ["the file is not a JSON object with a traceEvents list"], {}
    events = trace["traceEvents"]
    for e in events:
        problems += problems_of_event(e)
    if problems:
        return problems, {}
    processes = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e.get("tid")) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    complete = [e for e in events if e["ph"] == "X"]
    for e in complete + [e for e in events if e["ph"] == "C"]:
        if e["pid"] not in processes:
            problems.append("process %d has no process_name" % e["pid"])
    for e in complete:
        if (e["pid"], e["tid"]) not in threads:
            problems.append("thread %d of process %d has no thread_name" % (e["tid"], e["pid"]))
    tracks = {}
    for e in complete:
        tracks.setdefault((e["pid"], e["tid"]), []).append(e)
    for track in tracks.values():
        problems += nesting_problems(track)
    problems += flow_problems(events, complete)
    host = min(processes) if processes else None
    problems += counter_problems(events, complete, host)
    problems += wait_problems(complete)
    launch_of = {e["args"]["correlation"]: e for e in complete
                if e["pid"] == host and e["cat"] == "launch" and "correlation" in e.get("args", {})}
    figures = {"steps": 0, "kernels": 0, "host_waits_ms": 0.0}
    sums, spans, waits, recorded = [], [], [], 0.0
    for (pid, tid), track in sorted(tracks.items()):
        if pid == host:
            continue
        steps = [e for e in track if e["cat"] == "range" and e["name"] == "step"]
        kernels = [e for e in track if e["cat"] == "kernel"]
        figures["kernels"] += len(kernels)
        if not steps:
            if kernels:
                problems.append("thread %d of process %d has kernels but no step" % (tid, pid))
            continue
        for e in kernels:
            if not any(within(e, s) for s in steps):
                problems.append("kernel %r at %.3f us is in no step" % (e["name"], e["ts"]))
        figures["steps"] += len(steps)
        # The device's work on all its tracks counts (the loader's uploads
        # go to a track of their own), once where it overlaps.
        device_work = sorted((e for (p, _), t in tracks.items() if p == pid for e in t
                              if e["cat"] in ("kernel", "transfer")), key=lambda e: e["ts"])
        for s in steps:
            busy, waited = busy_time(device_work, s, gap_us, launch_of if host_waits else None)
            sums.append(busy + waited)
            waits.append(waited)
            spans.append(s["dur"])
            recorded += sum(e["dur"] for e in device_work if within(e, s))
    # Medians, as a burst of load elsewhere stretches a few steps (and the
    # device's waits for the host in them, counted with --host-waits).
    if not spans:
        return problems + ["the trace has no steps on a device"], {}
    launches = statistics.median(sums) / 1000.0
    reference = statistics.median(spans) / 1000.0
    figures["host_waits_ms"] = statistics.median(waits) / 1000.0
    figures.update(launches_ms=launches, step_ms=reference, recorded_ms=recorded / len(spans) / 1000.0)
    if (launches - reference if at_most else abs(launches - reference)) > tolerance * reference:
        problems.append("the steps' launches take %.3f ms of device time, %.0f%% of the steps' spans "
                        "(%.3f ms); more than %.0f%% apart" % (launches, 100.0 * launches / reference,
                                                               reference, 100 * tolerance))
    if launches_ms is not None and abs(figures["recorded_ms"] - launches_ms) > 0.01 * launches_ms:
        problems.append("the steps' kernels and transfers add up to %.4f ms a step, the profiler's table "
                        "to %.4f ms; more than 1%% apart" % (figures["recorded_ms"], launches_ms))
    return problems, figures


def within(e, step):
    return step["ts"] - SLACK_US <= e["ts"] and e["ts"] + e["dur"] <= step["ts"] + step["dur"] + SLACK_US


def busy_time(work, step, gap_us, launches):
    """The step's device time (us): its work (in time order, from every
    track of the device) merged where it overlaps, plus the gaps of at most
    gap_us between (and before the first, from the step's start); and
    apart, with launches (correlation -> the launch on the host), the part
    of each longer gap before the next work's launch ended, when the device
    waited for the host."""
    busy = waited = 0.0
    end = step["ts"]
    for e in (e for e in work if within(e, step)):
        e_end = e["ts"] + e["dur"]
        if e["ts"] >= end:
            gap = e["ts"] - end
            if 0 < gap <= gap_us:
                busy += gap
            elif gap > 0 and launches is not None:
                launch = launches.get(e.get("args", {}).get("correlation"))
                if launch is not None:
                    waited += min(gap, max(0.0, launch["ts"] + launch["dur"] - end))
            busy += e["dur"]
            end = e_end
        elif e_end > end:
            busy += e_end - end
            end = e_end
    return busy, waited


def counter_problems(events, complete, host):
    """Each device process with kernels has pool counters."""
    devices = {e["pid"] for e in complete if e["pid"] != host and e["cat"] == "kernel"}
    counted = {e["pid"] for e in events if e["ph"] == "C" and e["name"] == "pool MiB"
               and "in use" in e["args"] and "cached" in e["args"]}
    return ["process %d has kernels but no pool memory counters" % pid for pid in sorted(devices - counted)]


def wait_problems(complete):
    """Each transfer's wait in its queue ends at its start and begins no
    earlier than its queuing."""
    out = []
    transfers = {(e["pid"], e["args"].get("correlation")): e for e in complete
                 if e["cat"] == "transfer" and isinstance(e.get("args"), dict)}
    for w in (e for e in complete if e["cat"] == "queued"):
        t = transfers.get((w["pid"], (w.get("args") or {}).get("correlation")))
        if t is None:
            out.append("the wait %r at %.3f us belongs to no transfer" % (w["name"], w["ts"]))
            continue
        if abs(w["ts"] + w["dur"] - t["ts"]) > SLACK_US:
            out.append("the wait of %r ends at %.3f us, the transfer starts at %.3f"
                       % (w["name"], w["ts"] + w["dur"], t["ts"]))
        queued = t["args"].get("queued")
        if not number(queued) or w["ts"] < queued - SLACK_US:
            out.append("the wait of %r starts at %.3f us, before the transfer was queued (%r)"
                       % (w["name"], w["ts"], queued))
    return out


def flow_problems(events, complete):
    """Each flow id has one start and one finish, the finish on a kernel
    or transfer of the same correlation."""
    out = []
    starts, finishes = {}, {}
    for e in events:
        if e["ph"] in ("s", "f"):
            (starts if e["ph"] == "s" else finishes).setdefault(e["id"], []).append(e)
    spans = {(e["pid"], e["tid"], e["args"]["correlation"]): e for e in complete
             if e["cat"] in ("kernel", "transfer") and "correlation" in e.get("args", {})}
    for id_ in set(starts) | set(finishes):
        if len(starts.get(id_, [])) != 1 or len(finishes.get(id_, [])) != 1:
            out.append("flow %r has %d starts and %d finishes, not one of each"
                       % (id_, len(starts.get(id_, [])), len(finishes.get(id_, []))))
            continue
        f = finishes[id_][0]
        span = spans.get((f["pid"], f["tid"], id_))
        if span is None or not span["ts"] - SLACK_US <= f["ts"] <= span["ts"] + span["dur"] + SLACK_US:
            out.append("flow %r ends on no device work of its correlation" % (id_,))
    return out


def positive(text):
    value = float(text)
    if not value > 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError("%r is not a positive number of milliseconds" % text)
    return value


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace")
    parser.add_argument("--launches-ms", type=positive)
    parser.add_argument("--tolerance", type=float, default=0.10)
    parser.add_argument("--gap-us", type=float, default=0.0)
    parser.add_argument("--host-waits", action="store_true")
    parser.add_argument("--at-most", action="store_true")
    args = parser.parse_args()
    try:
        with open(args.trace, encoding="utf-8") as f:
            trace = json.load(f)
    except (OSError, ValueError) as error:
        print("FAIL %s: %s" % (args.trace, error))
        return 1
    problems, figures = check(trace, args.launches_ms, args.tolerance, args.gap_us, args.host_waits, args.at_most)
    for p in problems[:20]:
        print("FAIL %s: %s" % (args.trace, p))
    if problems:
        return 1
    print("ok %s: %d events well-formed and nested; %d steps, %d kernels; launches %.3f ms of device "
          "time per step against the steps' spans %.3f ms" % (args.trace, len(trace["traceEvents"]),
                                                              figures["steps"], figures["kernels"],
                                                              figures["launches_ms"], figures["step_ms"]))
    if args.host_waits:
        print("   of it %.3f ms waiting for the host" % figures["host_waits_ms"])
    if args.launches_ms is not None:
        print("   the steps' work adds up to %.4f ms a step, the profiler's table %.4f ms"
              % (figures["recorded_ms"], args.launches_ms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
