#!/usr/bin/env bash
# Compares two builds' training step in one invocation: runs
#   ug-bench train-mlp and train-cnn --no-epoch --no-modes
# from OLD and NEW build folders alternately, ROUNDS times each, and prints
# per configuration the median step time of each build and the ratio
# new / old (below 1: the new build is faster), and the same for the step's
# time over its matrix products (the step less the products' time alone in
# OpenBLAS, timed in the same run). Alternating spreads the machine's drift
# over both builds.
#   tools/bench_builds.sh OLD_BUILD NEW_BUILD [ROUNDS] [ug-bench options...]
# e.g. tools/bench_builds.sh /tmp/old/build build 5 --device cpu
set -euo pipefail
if [ $# -lt 2 ]; then
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
old=$1 new=$2
shift 2
rounds=5
if [ $# -gt 0 ] && [[ $1 =~ ^[0-9]+$ ]]; then
    rounds=$1
    shift
fi
for b in "$old" "$new"; do
    [ -x "$b/ug-bench" ] || { echo "no ug-bench in $b (build it: cmake --build $b --target ug-bench)" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for r in $(seq 1 "$rounds"); do
    for which in old new; do
        dir=$old
        [ "$which" = new ] && dir=$new
        for model in train-mlp train-cnn; do
            "$dir/ug-bench" "$model" --no-epoch --no-modes --seconds 0.5 "$@" \
                --csv "$work/$which-$model-$r.csv" >/dev/null
        done
    done
done
# Rows: model device batch -> step_ms of each round; the medians' ratio.
for model in train-mlp train-cnn; do
    for which in old new; do
        for f in "$work/$which-$model"-*.csv; do
            awk -F, -v w="$which" -v m="$model" 'NR > 1 && $3 == "plain" { print m, $1, $2, w, $4, $4 - $6 }' "$f"
        done
    done
done | awk '
    function median(list,    a, k, i, j, t) {
        k = split(list, a, " ")
        for (i = 2; i <= k; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
        return (k % 2) ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
    }
    { key = $1 " " $2 " " $3; keys[key] = 1; times[key, $4] = times[key, $4] " " $5; over[key, $4] = over[key, $4] " " $6 }
    END {
        printf "%-9s %-8s %5s %8s %8s %7s %9s %9s %7s\n", "model", "device", "batch", "old ms", "new ms", "new/old",
               "old-prod", "new-prod", "new/old"
        for (key in keys) {
            split(key, k, " ")
            o = median(times[key, "old"]); n = median(times[key, "new"])
            po = median(over[key, "old"]); pn = median(over[key, "new"])
            printf "%-9s %-8s %5d %8.3f %8.3f %7.3f %9.3f %9.3f %7.3f\n", k[1], k[2], k[3], o, n, n / o, po, pn,
                   (po > 0 ? pn / po : 0)
        }
    }' | sort -k1,1 -k3,3n
echo "(medians of $rounds alternating rounds; each run times the step for 0.5 s; -prod: the step's time"
echo " over its matrix products alone through OpenBLAS, timed in the same run)"
