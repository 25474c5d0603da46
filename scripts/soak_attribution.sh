#!/usr/bin/env bash
# Attributes the soak's decode p99 increase: one short soak per kind of other worker (and none,
# and all), each through the library and through the raw control (--decode raw), one JSON per
# run in DIR, then a table. A p99 that rises under --decode raw too is the driver's or the
# device's, not jitbridge's path; the launch/wait split and the slow-step counts say which part.
#
#   scripts/soak_attribution.sh [SECONDS [DEVICE [DIR]]]     defaults: 20, gpu, soak-attribution
#   JITBRIDGE=path/to/jitbridge (default target/release/jitbridge); WORKERS, MODES narrow the runs
#   scripts/soak_attribution.sh table DIR                     the table of runs already in DIR
set -uo pipefail
cd "$(dirname "$0")/.."

# The number after "key": inside object "obj" of the soak's one-line JSON (docs/JSON.md; obj
# empty: the first "key" anywhere).
get() {
    local obj=$1 key=$2 file=$3
    if [ -n "$obj" ]; then
        sed -n "s/.*\"$obj\":{[^}]*\"$key\":\([0-9.e+-]*\).*/\1/p" "$file"
    else
        sed -n "s/.*\"$key\":\([0-9.e+-]*\).*/\1/p" "$file"
    fi
}
us() { awk -v ns="${1:-0}" 'BEGIN { printf "%.1f", ns / 1000 }'; }
ratio() { awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }

table() {
    local dir=$1
    printf '%-8s %-7s | %-22s | %-22s | %-22s | %6s | %-28s | %s\n' mode workers \
        "p99 alone/others us" "launch p99 al/oth us" "wait p99 al/oth us" ratio \
        "slow w/ others: n (l/w dom)" "slow alone again"
    local mode workers f
    for mode in ${MODES:-library raw}; do for workers in ${WORKERS:-none all embed rerank shared batch fork}; do
        f="$dir/soak-$mode-$workers.json"
        [ -e "$f" ] || continue
        [ -s "$f" ] || { echo "$mode $workers: no output ($(tail -1 "${f%.json}.err" 2>/dev/null))"; continue; }
        printf '%-8s %-7s | %9s / %-10s | %9s / %-10s | %9s / %-10s | %6.2f | %6s of %-7s (%s/%s) | %s of %s%s\n' \
            "$mode" "$workers" \
            "$(us "$(get decode_alone p99_ns "$f")")" "$(us "$(get decode_together p99_ns "$f")")" \
            "$(us "$(get alone_launch p99_ns "$f")")" "$(us "$(get together_launch p99_ns "$f")")" \
            "$(us "$(get alone_wait p99_ns "$f")")" "$(us "$(get together_wait p99_ns "$f")")" \
            "$(ratio "$(get decode_together p99_ns "$f")" "$(get decode_alone p99_ns "$f")")" \
            "$(get slow_together over "$f")" "$(get slow_together steps "$f")" \
            "$(get slow_together launch_dominated "$f")" "$(get slow_together wait_dominated "$f")" \
            "$(get slow_alone over "$f")" "$(get slow_alone steps "$f")" \
            "$(grep -q '"exact":true' "$f" || echo '  NOT EXACT')"
    done; done
}

if [ "${1:-}" = table ]; then
    table "${2:?table needs the folder of JSON files}"
    exit 0
fi
seconds=${1:-20} device=${2:-gpu} dir=${3:-soak-attribution}
bin=${JITBRIDGE:-target/release/jitbridge}
mkdir -p "$dir"
# The workers' kernels are the same in every run: one warm-up run puts them in the disk cache,
# so that each measured run loads them as the 5-minute H200 soak did (34 disk loads).
"$bin" soak --seconds 5 --device "$device" --json >"$dir/warmup.json" 2>"$dir/warmup.err" ||
    echo "warm-up soak: exit status $?"
for mode in ${MODES:-library raw}; do
    for workers in ${WORKERS:-none all embed rerank shared batch fork}; do
        out="$dir/soak-$mode-$workers.json"
        "$bin" soak --seconds "$seconds" --device "$device" --workers "$workers" \
            --decode "$mode" --json >"$out" 2>"$dir/soak-$mode-$workers.err"
        echo "soak --decode $mode --workers $workers: exit status $?"
    done
done
table "$dir"
