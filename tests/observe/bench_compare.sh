#!/bin/sh
# ug-bench compare on two hand-written reports: A's figures in A's order,
# each with the first of B's figures of its name (B is in another order and
# repeats one), the headline ones unless --all, "-" for a ratio over 0,
# whole numbers from 1000 up, and names only one report has left out.
# Usage: bench_compare.sh UG_BENCH
set -u
bench=$1
dir=$(mktemp -d "${TMPDIR:-/tmp}/ug-compare.XXXXXX")
trap 'rm -rf "$dir"' EXIT
failed=0
fail() { echo "FAIL $*"; failed=1; }

cat > "$dir/a.json" <<'JSON'
{"unigrad_report": 1,
"machine": {"label": "base", "when": "2025-01-01 00:00:00", "cpu": "x", "threads": 2, "devices": []},
"figures": [
  {"name": "gemm/cpu/square 2048/gflops", "value": 100},
  {"name": "gemm/cpu/square 2048/ratio", "value": 0.5},
  {"name": "train-mlp/cpu/64/plain/step_ms", "value": 2},
  {"name": "conv/cpu/conv1/64/ug_step_ms", "value": 0},
  {"name": "gemm/cpu/only-a/gflops", "value": 3},
  {"name": "train-cnn/cpu/64/plain/samples_per_s", "value": 1500}
]}
JSON
cat > "$dir/b.json" <<'JSON'
{"unigrad_report": 1,
"machine": {"label": "new", "when": "2025-01-02 00:00:00", "cpu": "y", "threads": 2, "devices": []},
"figures": [
  {"name": "train-cnn/cpu/64/plain/samples_per_s", "value": 3000},
  {"name": "gemm/cpu/square 2048/ratio", "value": 0.25},
  {"name": "train-mlp/cpu/64/plain/step_ms", "value": 3},
  {"name": "train-mlp/cpu/64/plain/step_ms", "value": 99},
  {"name": "conv/cpu/conv1/64/ug_step_ms", "value": 4},
  {"name": "gemm/cpu/square 2048/gflops", "value": 150},
  {"name": "gemm/cpu/only-b/gflops", "value": 1}
]}
JSON
cat > "$dir/headline.expected" <<EOF2
A: $dir/a.json - base
B: $dir/b.json - new
figure                                       A         B   B / A
gemm/cpu/square 2048/gflops                100       150   1.500
train-mlp/cpu/64/plain/step_ms               2         3   1.500
conv/cpu/conv1/64/ug_step_ms                 0         4       -
train-cnn/cpu/64/plain/samples_per_s      1500      3000   2.000
EOF2
cat > "$dir/all.expected" <<EOF2
A: $dir/a.json - base
B: $dir/b.json - new
figure                                       A         B   B / A
gemm/cpu/square 2048/gflops                100       150   1.500
gemm/cpu/square 2048/ratio                 0.5      0.25   0.500
train-mlp/cpu/64/plain/step_ms               2         3   1.500
conv/cpu/conv1/64/ug_step_ms                 0         4       -
train-cnn/cpu/64/plain/samples_per_s      1500      3000   2.000
EOF2

"$bench" compare "$dir/a.json" "$dir/b.json" > "$dir/headline" 2>&1 || fail "compare: $(cat "$dir/headline")"
diff "$dir/headline.expected" "$dir/headline" || fail "the headline figures differ (expected, got)"
"$bench" compare "$dir/a.json" "$dir/b.json" --all > "$dir/all" 2>&1 || fail "compare --all: $(cat "$dir/all")"
diff "$dir/all.expected" "$dir/all" || fail "every figure differs (expected, got)"

# Nothing shared: said so.
printf '{"unigrad_report": 1,\n"figures": [\n  {"name": "z/gflops", "value": 1}\n]}\n' > "$dir/c.json"
"$bench" compare "$dir/a.json" "$dir/c.json" > "$dir/none" 2>&1 || fail "compare with nothing shared"
tail -n 1 "$dir/none" | grep -qx "the two reports share no headline figure" || fail "no word of nothing shared: $(cat "$dir/none")"
exit $failed
