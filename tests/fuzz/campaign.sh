#!/bin/sh
# The long fuzzing campaign of docs/reliability.md ("Fuzzing"): every target, one at a time,
# for RUNS inputs each (default 1,000,000), from its seed corpus, at low CPU priority (nice 10).
# Usage (from the repository root): tests/fuzz/campaign.sh [RUNS] [OUT] [TARGET...]
# Each target's log is OUT/<target>.log (final figures: the "DONE" line and stat:: lines); the
# inputs it found go to OUT/<target>/, crash-* files (findings) to OUT/.
set -u
RUNS=${1:-1000000}
OUT=${2:-/tmp/gsp-fuzz-campaign}
shift 2 2>/dev/null || shift $#
TARGETS=${*:-wire handshake ws spark_rows options}
PY=${PYTHON:-python}
mkdir -p "$OUT"
for t in $TARGETS; do
    mkdir -p "$OUT/$t"
    echo "$(date -u +%FT%TZ) $t: $RUNS runs" >&2
    nice -n "${NICE:-10}" "$PY" "tests/fuzz/fuzz_$t.py" "$OUT/$t" "tests/fuzz/corpus/$t" \
        -runs="$RUNS" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$OUT/$t-" >"$OUT/$t.log" 2>&1
    rc=$?
    echo "$(date -u +%FT%TZ) $t: exit $rc; $(grep -E '^#[0-9]+[[:space:]]+DONE' "$OUT/$t.log" | tail -1)" >&2
done
