#!/usr/bin/env bash
# make fuzz: tests/hostile/test_fuzz.py's fuzzer for FUZZ_SECONDS, as batches of FUZZ_BATCH new
# random examples (Hypothesis has no time budget of its own; a batch is one pytest session with
# its own statistics). Stops at the first failing example (-x) with its script printed, else
# prints how many examples ran, from the batches' own "N passing" lines.
set -uo pipefail
seconds=${FUZZ_SECONDS:-2100} batch=${FUZZ_BATCH:-200} bin=${BIN:-.venv/bin}
log=$(mktemp) && trap 'rm -f "$log"' EXIT
ran=0 batches=0 start=$SECONDS
while (( SECONDS - start < seconds )); do
    FUZZ_LONG=1 FUZZ_EXAMPLES=$batch "$bin/pytest" -q -x --timeout 0 -p no:cacheprovider \
        --hypothesis-show-statistics tests/hostile/test_fuzz.py >"$log" 2>&1
    rc=$?
    if (( rc != 0 )); then
        cat "$log"
        echo "make fuzz: batch $((batches + 1)) failed after $ran passing examples in $((SECONDS - start)) s" >&2
        exit "$rc"
    fi
    n=$(grep -oE '[0-9]+ passing' "$log" | head -1 | cut -d' ' -f1)
    ran=$((ran + ${n:-0})) batches=$((batches + 1))
    echo "batch $batches: ${n:-0} passing ($ran in $((SECONDS - start)) s)"
done
echo "make fuzz: $ran examples in $batches batches, $((SECONDS - start)) s, none failing"
