#!/usr/bin/env bash
# The observability checks that need the NVIDIA GPU (after build.sh), for
# docs/GPU.md: ug-train --profile on cuda:0 through check_trace.py, ug-bench
# --trace against its step, ug-train --tensorboard opened by TensorBoard's
# own reader (EventAccumulator, from the pip package), and ug-smi --json
# beside nvidia-smi --query-gpu while ug-train runs (memory used within 1%,
# utilisation within 10 points). Logs go to $1 (default: the build folder).
set -uo pipefail
cd "$(dirname "$0")/../.."
. tools/gpu/env.sh
logs=${1:-$UG_GPU_BUILD}
mkdir -p "$logs"
status=0
data=/tmp/unigrad-observe-data
mkdir -p "$data" && sh tests/observe/make_idx.sh "$data" 8192 2>/dev/null || true
train="$UG_GPU_BUILD/ug-train --device cuda:0 --data $data --quiet"

echo "== ug-train --profile on cuda:0, checked"
$train --epochs 1 --profile "$logs/cuda-train.json" | tail -n 20 || status=1
python3 tests/observe/check_trace.py "$logs/cuda-train.json" --gap-us 3 --host-waits || status=1
"$UG_GPU_BUILD/ug-bench" train-mlp --device cuda:0 --no-epoch --no-modes --seconds 1 \
    --trace "$logs/cuda-bench.json" --csv "$logs/cuda-bench.csv" | grep -E "^cuda|profiler|traced" || status=1
# One trace per batch size, named after the --trace path; checked at batch 64.
step=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "traced_step_ms") c = i } $2 == 64 { print $c }' \
    "$logs/cuda-bench.csv")
python3 tests/observe/check_trace.py "$logs/cuda-bench-cuda_0-b64.json" --step-ms "$step" --gap-us 3 --host-waits || status=1

echo "== ug-train --tensorboard, read by TensorBoard's EventAccumulator"
rm -rf "$logs/tb" && $train --epochs 2 --val-split 0.25 --tensorboard "$logs/tb" --csv "$logs/tb.csv" >/dev/null || status=1
python3 tests/observe/read_tfevents.py "$logs"/tb/events.out.tfevents.* "$logs/tb.csv" || status=1
python3 - "$logs/tb" <<'PY' || status=1
import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1])
acc.Reload()
tags = acc.Tags()["scalars"]
assert "train/loss" in tags and "epoch/test_accuracy" in tags, tags
print("TensorBoard's EventAccumulator read %d scalar series: %s; last test accuracy %.4f"
      % (len(tags), ", ".join(sorted(tags)), acc.Scalars("epoch/test_accuracy")[-1].value))
PY

echo "== ug-smi --json beside nvidia-smi while ug-train runs"
# Long enough to outlast the samples (an epoch takes about 0.15 s); killed after.
$train --epochs 2000 >/dev/null 2>&1 &
pid=$!
sleep 6
# NVML's utilisation is the share of its last sample period (a sixth of a
# second to a second) with a kernel running, and ug-train's varies between
# its epochs: ug-smi's read must fall within 10 points of nvidia-smi's just
# before and just after it.
query() { nvidia-smi --query-gpu=utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits -i 0; }
for round in 1 2 3; do
    before=$(query)
    ug=$("$UG_GPU_BUILD/ug-smi" --json --device cuda:0)
    after=$(query)
    python3 - "$before" "$after" "$ug" "$pid" <<'PY' || status=1
import json, sys
smi = [[float(x) for x in read.split(",")] for read in sys.argv[1:3]]
d = json.loads(sys.argv[3])["devices"][0]
mine = [p for p in d["processes"] if p["pid"] == int(sys.argv[4])]
util, used = d["utilization_percent"], d["memory_used_bytes"] / 2**20
print("nvidia-smi: %.0f%%, %.0f%% %.0f/%.0f MiB; ug-smi: %s%% %.0f/%.0f MiB (%s); ug-train's pool %s MiB"
      % (smi[0][0], smi[1][0], smi[0][1], smi[0][2], util, used, d["memory_total_bytes"] / 2**20, d["source"],
         mine and round(mine[0]["bytes_in_use"] / 2**20, 1)))
assert any(abs(used - s[1]) <= 0.01 * s[1] + 2 for s in smi), "memory differs by more than 1%"
assert min(s[0] for s in smi) - 10 <= util <= max(s[0] for s in smi) + 10, \
    "utilisation more than 10 points outside nvidia-smi's reads around it"
assert mine, "ug-train is not listed"
PY
    sleep 1
done
kill $pid 2>/dev/null
exit $status
