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
python3 tests/observe/check_trace.py "$logs/cuda-train.json" --gap-us 3 || status=1
"$UG_GPU_BUILD/ug-bench" train-mlp --device cuda:0 --no-epoch --no-modes --seconds 1 \
    --trace "$logs/cuda-bench.json" --csv "$logs/cuda-bench.csv" | grep -E "^cuda|profiler|traced" || status=1
# One trace per batch size, named after the --trace path; checked at batch 64.
step=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "traced_step_ms") c = i } $2 == 64 { print $c }' \
    "$logs/cuda-bench.csv")
python3 tests/observe/check_trace.py "$logs/cuda-bench-cuda_0-b64.json" --step-ms "$step" --gap-us 3 || status=1

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
for round in 1 2 3; do
    smi=$(nvidia-smi --query-gpu=utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits -i 0)
    ug=$("$UG_GPU_BUILD/ug-smi" --json --device cuda:0)
    python3 - "$smi" "$ug" "$pid" <<'PY' || status=1
import json, sys
util, used, total = (float(x) for x in sys.argv[1].split(","))
d = json.loads(sys.argv[2])["devices"][0]
mine = [p for p in d["processes"] if p["pid"] == int(sys.argv[3])]
print("nvidia-smi: %.0f%% %.0f/%.0f MiB; ug-smi: %s%% %.0f/%.0f MiB (%s); ug-train's pool %s MiB"
      % (util, used, total, d["utilization_percent"], d["memory_used_bytes"] / 2**20,
         d["memory_total_bytes"] / 2**20, d["source"], mine and round(mine[0]["bytes_in_use"] / 2**20, 1)))
assert abs(d["memory_used_bytes"] / 2**20 - used) <= 0.01 * used + 2, "memory differs by more than 1%"
assert abs(d["utilization_percent"] - util) <= 10, "utilisation differs by more than 10 points"
assert mine, "ug-train is not listed"
PY
    sleep 1
done
kill $pid 2>/dev/null
exit $status
