#!/usr/bin/env bash
# Shows that the tests catch each race: builds the test executables once per lock removed (and
# once with every lock in), runs them N times each, and prints a table of runs that failed and
# runs killed by a signal.
#
#   scripts/lock_removal_table.sh                      build for cpu here, then run 20 times
#   scripts/lock_removal_table.sh build cuda DIR       build for cuda, stage executables in DIR
#   scripts/lock_removal_table.sh run DIR [RUNS]       run staged executables (on the GPU host)
#   scripts/lock_removal_table.sh tsan [RUNS]          the C stress under ThreadSanitizer, cpu
set -euo pipefail
cd "$(dirname "$0")/.."

CONFIGS="${CONFIGS:-none jit_cache event_pool configure}"

# Stages the race tests of one build into DIR/<lock>/.
build() {
    local features=$1 dir=$2
    for lock in $CONFIGS; do
        # Only this explicit --cfg removes a lock; no environment variable of its own can.
        local cfg=""
        [ "$lock" = none ] || cfg="--cfg jitbridge_remove_lock=\"$lock\""
        mkdir -p "$dir/$lock"
        RUSTFLAGS="${RUSTFLAGS:-} $cfg" CARGO_TARGET_DIR="target/locks/$features-$lock" \
            cargo test --release ${features:+--features $features} --no-run \
            --message-format=json 2>/dev/null |
            python3 -c '
import json, shutil, sys
wanted = {sys.argv[2] + "_jit_module_concurrency", "cache_behaviour", "event_pool_stress"}
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") \
            and m["target"]["name"] in wanted:
        shutil.copy2(m["executable"], sys.argv[1] + "/" + m["target"]["name"])
' "$dir/$lock" "${features:-cpu}"
        echo "staged $(ls "$dir/$lock" | tr '\n' ' ')in $dir/$lock" >&2
    done
}

# Runs every staged executable of each config RUNS times and prints the table: a run fails when
# any executable fails; the last column counts failures per executable.
run() {
    local dir=$1 runs=${2:-20}
    printf '%-12s %-5s %-7s %-7s %-8s %s\n' "lock removed" runs failed signal seconds \
        "failures per test executable"
    for lock in $CONFIGS; do
        [ -d "$dir/$lock" ] || continue
        local failed=0 signalled=0 start end exe
        declare -A per_exe=()
        start=$(date +%s%N)
        for ((i = 1; i <= runs; i++)); do
            local run_failed=0
            for exe in "$dir/$lock"/*; do
                local rc=0 name
                name=$(basename "$exe")
                "$exe" --test-threads=1 >"$dir/$lock-$name.log" 2>&1 || rc=$?
                if [ "$rc" -ne 0 ]; then
                    run_failed=1
                    per_exe[$name]=$((${per_exe[$name]:-0} + 1))
                    if [ "$rc" -gt 128 ]; then
                        signalled=$((signalled + 1))
                        per_exe[$name-signal-$((rc - 128))]=$((${per_exe[$name-signal-$((rc - 128))]:-0} + 1))
                    fi
                fi
            done
            failed=$((failed + run_failed))
        done
        end=$(date +%s%N)
        local ms=$(((end - start) / 1000000)) detail=""
        for exe in "${!per_exe[@]}"; do
            detail+="$exe ${per_exe[$exe]}/$runs; "
        done
        printf '%-12s %-5s %-7s %-7s %-8s %s\n' "$lock" "$runs" "$failed" "$signalled" \
            "$((ms / 1000)).$((ms % 1000 / 100))" "${detail:-none}"
        unset per_exe
    done
}

# Builds the ThreadSanitizer stress once per config and counts the runs that report a race.
tsan() {
    local runs=${1:-20}
    printf '%-12s %-5s %-8s %-7s %s\n' "lock removed" runs reported other "first report"
    for lock in $CONFIGS; do
        local remove="" exe reported=0 other=0 first=""
        [ "$lock" = none ] || remove=$lock
        exe=cbridge/build${remove:+-no-$remove}-tsan/tsan_stress
        make -s -C cbridge REMOVE_LOCK="$remove" "${exe#cbridge/}" >/dev/null 2>&1
        for ((i = 1; i <= runs; i++)); do
            local rc=0
            TSAN_OPTIONS="halt_on_error=1 exitcode=66" "$exe" >"$exe.log" 2>&1 || rc=$?
            if [ "$rc" -eq 66 ]; then
                reported=$((reported + 1))
                [ -n "$first" ] || first=$(grep -m1 'SUMMARY: ThreadSanitizer' "$exe.log" | cut -c27-)
            elif [ "$rc" -ne 0 ]; then
                other=$((other + 1))
            fi
        done
        printf '%-12s %-5s %-8s %-7s %s\n' "$lock" "$runs" "$reported" "$other" "${first:-none}"
    done
}

case "${1:-}" in
build) build "${2:?features}" "${3:?dir}" ;;
run) run "${2:?dir}" "${3:-20}" ;;
tsan) tsan "${2:-20}" ;;
"")
    build "" target/lock-table
    run target/lock-table "${RUNS:-20}"
    ;;
*)
    sed -n '2,9p' "$0"
    exit 2
    ;;
esac
