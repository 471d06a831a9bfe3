#!/bin/sh
# ug-bench report writes valid PNG plots (check_png.py), a Markdown report
# with the machine and every section, and a JSON file of figures that
# Python's json module reads; ug-bench compare gives 1 for a report against
# itself, 2 against a copy with every figure doubled, and refuses a file
# that is not a report.
# Usage: bench_report.sh UG_BENCH CHECK_PNG
set -u
bench=$1 checker=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/ug-report.XXXXXX")
trap 'rm -rf "$dir"' EXIT
failed=0
fail() { echo "FAIL $*"; failed=1; }

"$bench" report --out "$dir/r" --device cpu --seconds 0.1 --label "suite" > "$dir/out" 2>&1 ||
    { cat "$dir/out"; echo "FAIL ug-bench report"; exit 1; }
tail -n 1 "$dir/out"
python3 "$checker" "$dir"/r/*.png || fail "the plots"
[ "$(ls "$dir"/r/*.png | wc -l)" -eq 4 ] || fail "not 4 plots: $(ls "$dir/r")"
for section in "## Machine" "## GEMM" "## MLP training step" "## CNN training step" "## Convolutions" \
    "](gemm.png)" "](train-mlp.png)" "](train-cnn.png)" "](conv.png)" "- CPU: "; do
    grep -qF -- "$section" "$dir/r/report.md" || fail "report.md has no '$section'"
done
python3 - "$dir/r/report.json" "$dir/doubled.json" <<'PY' || fail "report.json"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["unigrad_report"] == 1 and r["machine"]["cpu"] and r["machine"]["devices"], r["machine"]
names = [f["name"] for f in r["figures"]]
assert len(names) == len(set(names)), "figure names repeat"
for prefix in ("gemm/cpu/", "train-mlp/cpu/64/plain/step_ms", "train-cnn/cpu/64/plain/", "conv/cpu/conv1/64/"):
    assert any(n.startswith(prefix) for n in names), prefix
print("ok report.json: %d figures" % len(names))
text = open(sys.argv[1]).read()
lines = []
for line in text.splitlines():
    if '"value": ' in line:
        head, value = line.rsplit('"value": ', 1)
        line = head + '"value": %.10g}' % (2 * float(value.rstrip("},"))) + ("," if line.endswith(",") else "")
    lines.append(line)
open(sys.argv[2], "w").write("\n".join(lines) + "\n")
PY
"$bench" compare "$dir/r/report.json" "$dir/r/report.json" > "$dir/same" || fail "compare with itself"
cat "$dir/same"
awk 'NR > 3 { if ($NF != "1.000") bad = 1; n++ } END { exit !(n > 0 && !bad) }' "$dir/same" ||
    fail "a report against itself is not 1.000 throughout"
"$bench" compare "$dir/r/report.json" "$dir/doubled.json" --all > "$dir/doubled" || fail "compare with the copy"
awk 'NR > 3 && $(NF - 2) != 0 { if ($NF != "2.000") bad = 1; n++ } END { exit !(n > 0 && !bad) }' "$dir/doubled" ||
    fail "doubled figures are not 2.000: $(head -5 "$dir/doubled")"
"$bench" compare "$dir/r/report.json" "$dir/r/gemm.csv" > /dev/null 2> "$dir/refused" && fail "a CSV was compared"
grep -q "is not a report" "$dir/refused" || fail "no reason given: $(cat "$dir/refused")"
exit $failed
