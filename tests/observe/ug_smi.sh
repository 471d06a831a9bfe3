#!/bin/sh
# ug-smi --json lists the devices with real figures: the CPU's memory is
# /proc/meminfo's, utilisation a percentage; a running ug-train appears
# with its pool's memory and, once killed, is recognised as gone; a
# missing figure is null with a reason. With "nvml" (run with the emulated
# CUDA device and UG_NVML_LIBRARY set to the fake NVML), cuda:0 shows the
# fake's figures.
# Given ug-devices and pool_steps (pool_steps.c) too: the memory total of
# cpu and opencl:0 is ug-devices' (the size the device reports, which a
# pool holds to), and a live process's pool figures, changed in a burst and
# then left alone, reach ug-smi within a second, growing and shrinking.
# Usage: ug_smi.sh UG_SMI UG_TRAIN [nvml | UG_DEVICES POOL_STEPS]
set -u
smi=$1 train=$2 mode=${3:-} steps=${4:-}
dir=$(mktemp -d "${TMPDIR:-/tmp}/ug-smi.XXXXXX")
trap '[ $pid -gt 0 ] && kill -9 $pid 2>/dev/null; [ $steps_pid -gt 0 ] && kill -9 $steps_pid 2>/dev/null; rm -rf "$dir"' EXIT
pid=0 steps_pid=0
failed=0
fail() { echo "FAIL $*"; failed=1; }

if [ "$mode" = nvml ]; then
    "$smi" --json --device cuda:0 > "$dir/smi.json" || { echo "FAIL ug-smi --device cuda:0"; exit 1; }
    cat "$dir/smi.json"
    python3 - "$dir/smi.json" <<'PY' || fail "cuda:0's figures"
import json, sys
d = json.load(open(sys.argv[1]))["devices"][0]
assert d["id"] == "cuda:0" and d["source"] == "NVML", d
assert d["utilization_percent"] == 37 and d["memory_used_bytes"] == 1.5 * 2**30, d
assert d["memory_total_bytes"] == 80 * 2**30 and d["temperature_c"] == 41 and d["clock_mhz"] == 1755, d
assert d["power_w"] is None and "Not Supported" in d["power_w_why"], d
print("ok cuda:0 through NVML:", d["utilization_percent"], "%", d["memory_used_bytes"], "bytes")
PY
    exit $failed
fi

# Crafted inputs, through the environment the monitor reads its roots and
# the registry's folder from: figures that are not finite or not possible
# (10^308 kB of memory, clocks summing to infinity, 10^297 degrees), a FIFO
# named *.pool, a command that is neither UTF-8 nor free of control
# characters. The JSON still parses, with nulls and reasons, and ug-smi
# waits on nothing (a timeout far below ctest's: the old ug-smi hung on the
# FIFO, and printed bare inf).
crafted=$dir/crafted
mkdir -p "$crafted/proc" "$crafted/sys/class/hwmon/hwmon0" && mkdir -m 700 "$crafted/run" "$crafted/run/unigrad"
printf 'cpu  100 0 50 800 50 0 0 0 0 0\n' > "$crafted/proc/stat"
printf 'MemTotal: 1e308 kB\nMemAvailable: 1 kB\n' > "$crafted/proc/meminfo"
printf 'cpu MHz : 1e308\ncpu MHz : 1e308\n' > "$crafted/proc/cpuinfo"
printf 'k10temp\n' > "$crafted/sys/class/hwmon/hwmon0/name"
printf '1e300\n' > "$crafted/sys/class/hwmon/hwmon0/temp1_input"
mkfifo "$crafted/run/unigrad/1.pool"
start=$(awk '{print $22}' /proc/$$/stat) # this shell's, so its entry is current
printf 'unigrad-pool 1\npid %s\nstart %s\ncommand bad\377\033name\ndevice cpu 4096 0 4096\n' $$ "$start" \
    > "$crafted/run/unigrad/$$.pool"
UG_PROCFS_ROOT=$crafted/proc UG_SYSFS_ROOT=$crafted/sys XDG_RUNTIME_DIR=$crafted/run \
    timeout 20 "$smi" --json --device cpu > "$dir/crafted.json"
rc=$?
[ $rc -ne 124 ] || fail "ug-smi --json hung on the FIFO $crafted/run/unigrad/1.pool"
[ $rc -eq 0 ] || fail "ug-smi --json with crafted inputs exited $rc"
python3 -m json.tool "$dir/crafted.json" > /dev/null || { cat "$dir/crafted.json"; fail "ug-smi --json printed no JSON"; }
python3 - "$dir/crafted.json" "$$" <<'PY' || fail "the crafted figures"
import json, sys
cpu = json.load(open(sys.argv[1], encoding="utf-8"))["devices"][0]
for key in ("memory_total_bytes", "memory_used_bytes", "clock_mhz"):
    assert cpu[key] is None and "gave inf" in cpu[key + "_why"], (key, cpu)
assert cpu["temperature_c"] is None and "1e+297" in cpu["temperature_c_why"], cpu
mine = [p for p in cpu["processes"] if p["pid"] == int(sys.argv[2])]
assert mine and mine[0]["command"] == "bad\ufffd?name" and mine[0]["bytes_in_use"] == 4096, cpu["processes"]
print("ok crafted inputs: nulls with reasons, the FIFO passed over, command", ascii(mine[0]["command"]))
PY

sh "$(dirname "$0")/make_idx.sh" "$dir" 2048 || exit 1
"$train" --device cpu --data "$dir" --epochs 1000 --quiet > "$dir/train.out" 2>&1 &
pid=$!
listed=""
for _ in $(seq 1 100); do
    "$smi" --json > "$dir/smi.json" || { fail "ug-smi --json"; break; }
    if grep -q "\"pid\":$pid," "$dir/smi.json"; then listed=yes; break; fi
    sleep 0.1
done
[ -n "$listed" ] || fail "ug-train (pid $pid) never appeared in ug-smi --json"
python3 - "$dir/smi.json" "$pid" "${UG_TEST_REQUIRED_DEVICES:-cpu}" <<'PY' || fail "the figures"
import json, sys
sample = json.load(open(sys.argv[1]))
devices = {d["id"]: d for d in sample["devices"]}
for required in sys.argv[3].split(","):
    assert required in devices, "%s is not listed: %s" % (required, list(devices))
kb = next(int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal:"))
for d in devices.values():
    for key, value in d.items():
        if key.endswith("_why"):
            assert d[key[:-4]] is None and value, (key, d)
        elif value is None:
            assert d.get(key + "_why"), "%s of %s is null without a reason" % (key, d["id"])
cpu = devices["cpu"]
assert cpu["memory_total_bytes"] == kb * 1024, (cpu["memory_total_bytes"], kb)
assert 0 <= cpu["utilization_percent"] <= 100, cpu
assert 0 < cpu["memory_used_bytes"] < cpu["memory_total_bytes"], cpu
mine = [p for p in cpu["processes"] if p["pid"] == int(sys.argv[2])]
assert mine and mine[0]["command"] == "ug-train" and mine[0]["bytes_in_use"] > 0, cpu["processes"]
print("ok", ", ".join(sorted(devices)), "listed; cpu %.0f%% busy, %.1f of %.1f GiB; ug-train holds %.1f MiB"
      % (cpu["utilization_percent"], cpu["memory_used_bytes"] / 2**30, cpu["memory_total_bytes"] / 2**30,
         mine[0]["bytes_in_use"] / 2**20))
PY
kill -9 $pid
wait $pid 2>/dev/null
"$smi" --json > "$dir/smi.json" || fail "ug-smi --json after the kill"
! grep -q "\"pid\":$pid," "$dir/smi.json" || fail "the killed ug-train (pid $pid) is still listed"
"$smi" > "$dir/smi.txt" || fail "ug-smi"
cat "$dir/smi.txt"
grep -q "^cpu " "$dir/smi.txt" || fail "the table has no cpu row"
if [ -n "$steps" ]; then
    devices=$mode
    # One meaning of a device's memory total in both tools: the size the
    # device reports (POCL's, which it does not enforce, is what a pool
    # holds to). The old ug-smi gave POCL's device the host's memory.
    "$devices" --json --no-self-test > "$dir/devices.json" || fail "ug-devices --json --no-self-test"
    "$smi" --json > "$dir/smi.json" || fail "ug-smi --json"
    python3 - "$dir/devices.json" "$dir/smi.json" <<'PY' || fail "ug-smi's memory totals against ug-devices'"
import json, sys
listed = {d["id"]: d["global_memory"] for d in json.load(open(sys.argv[1]))["devices"]}
sampled = {d["id"]: d for d in json.load(open(sys.argv[2]))["devices"]}
checked = [i for i in ("cpu", "opencl:0") if i in listed]
assert "cpu" in checked and set(checked) <= set(sampled), (checked, list(sampled))
for i in checked:
    total = sampled[i]["memory_total_bytes"]
    assert total == listed[i], "%s: ug-smi's memory total is %s bytes, ug-devices' %d" % (i, total, listed[i])
print("ok memory totals as ug-devices':", ", ".join("%s %.2f GiB" % (i, listed[i] / 2**30) for i in checked))
PY

    # A pool that changes in a burst and is then left alone, growing
    # (1 MiB and 8 MiB, whole size classes) and then shrinking (both freed
    # to the cache): a second after each step ug-smi shows the figures
    # the process's own pool gives. The old registry showed the burst's
    # first change for ever.
    trap '' PIPE # a pool_steps that died: a failed write, said below, not the end of this script
    mkfifo "$dir/steps.in"
    "$steps" cpu 1048576 8388608 < "$dir/steps.in" > "$dir/steps.out" 2> "$dir/steps.err" &
    steps_pid=$!
    exec 3> "$dir/steps.in"
    for step in 1 2; do
        echo go >&3
        for _ in $(seq 1 300); do
            [ "$(wc -l < "$dir/steps.out")" -ge $step ] && break
            kill -0 $steps_pid 2>/dev/null || break
            sleep 0.1
        done
        figures=$(sed -n "${step}p" "$dir/steps.out")
        [ -n "$figures" ] || { fail "pool_steps gave no figures for step $step: $(cat "$dir/steps.err")"; break; }
        sleep 1 # the bound: a second after the pool's last change
        "$smi" --json --device cpu > "$dir/smi.json" || { fail "ug-smi --json --device cpu"; break; }
        python3 - "$dir/smi.json" $steps_pid $step $figures <<'PY' || fail "ug-smi's figures a second after step $step"
import json, sys
path, pid, step, _, in_use, _, cached = sys.argv[1:8]
pool = (int(in_use), int(cached))
burst = 9 * 2**20
# The pool's own figures, worked by hand: the burst's blocks in use, then cached.
assert pool[0] >= burst if step == "1" else pool[1] >= burst, "pool_steps' pool after step %s: %s" % (step, pool)
cpu = json.load(open(path))["devices"][0]
mine = [p for p in cpu["processes"] if p["pid"] == int(pid)]
assert mine, "pool_steps (pid %s) is not listed: %s" % (pid, cpu["processes"])
shown = (mine[0]["bytes_in_use"], mine[0]["bytes_cached"])
assert shown == pool, "a second after step %s ug-smi shows %d bytes in use and %d cached; the pool holds %d and %d" % (
    step, *shown, *pool)
print("ok a second after step %s ug-smi shows the pool's %.1f MiB in use, %.1f MiB cached" % (
    step, shown[0] / 2**20, shown[1] / 2**20))
PY
    done
    exec 3>&- # the end of its input: pool_steps exits, and its file goes
    wait $steps_pid
    rc=$?
    [ $rc -eq 0 ] || fail "pool_steps exited $rc: $(cat "$dir/steps.err")"
    "$smi" --json --device cpu > "$dir/smi.json" || fail "ug-smi --json after pool_steps exited"
    ! grep -q "\"pid\":$steps_pid," "$dir/smi.json" || fail "pool_steps (pid $steps_pid) is listed after its exit"
    steps_pid=0
fi

"$smi" --watch 0 > /dev/null 2>&1 && fail "--watch 0 was accepted"
"$smi" --device nosuch > /dev/null 2>&1 && fail "an unknown device was accepted"
exit $failed
