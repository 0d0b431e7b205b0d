#!/bin/bash
# kill -9 at random points of a checkpoint write (shards, commit, latest) until at least
# CRASH_KILLS (default 20) kills have interrupted a write in progress. After every kill: the
# newest complete checkpoint verifies, any partial one is listed incomplete and ignored by
# load, and gc removes it.
set -u
: "${OMNI_CKPT:?run through make check}" "${MAKE_TEST_CKPT:?run through make check}"
PY=/usr/bin/python3
KILLS=${CRASH_KILLS:-20}
MAX_ITERATIONS=$((KILLS * 4))
ROWS=${CRASH_ROWS:-16384}        # model/frozen of ROWS x 256 fp32: 16 MiB by default
tmp=$(mktemp -d /tmp/omni-ckpt-crash.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
root=$tmp/root
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# The previous checkpoint, and how long a whole write takes (the window to kill in; the
# second write is timed, the first pays for cold caches).
"$MAKE_TEST_CKPT" "$root" 0 4 --rows "$ROWS" >/dev/null || { echo "cannot write step 0" >&2; exit 1; }
t0=$(date +%s%N)
"$MAKE_TEST_CKPT" "$root" 1 4 --rows "$ROWS" >/dev/null || { echo "cannot write step 1" >&2; exit 1; }
window_ms=$(( ($(date +%s%N) - t0) / 1000000 + 5 ))
echo "a full write takes about $window_ms ms; killing at random points in it"

# What the --seed iterations below write: an incremental checkpoint with its base's values,
# in which every rank leaves a reference shard and no HDF5 shard.
"$MAKE_TEST_CKPT" "$tmp/refs" 0 4 >/dev/null && "$MAKE_TEST_CKPT" "$tmp/refs" 1 4 --seed 0 \
    --base "$tmp/refs/step-0000000000" >/dev/null || { echo "cannot write the reference-shard checkpoint" >&2; exit 1; }
n_ref=$(ls "$tmp/refs/step-0000000001" | grep -c '^shard-.*\.ref$')
n_h5=$(ls "$tmp/refs/step-0000000001" | grep -c '^shard-.*\.h5$')
[ "$n_ref" -eq 4 ] && [ "$n_h5" -eq 0 ] || fail "an unchanged incremental left $n_ref reference and $n_h5 HDF5 shards, expected 4 and 0"
"$OMNI_CKPT" verify --quiet "$tmp/refs/step-0000000001" || fail "the reference-shard checkpoint does not verify"

RANDOM=${CRASH_SEED:-$$}
partial_seen=0 committed=0 i=0
while [ "$partial_seen" -lt "$KILLS" ] && [ "$i" -lt "$MAX_ITERATIONS" ]; do
    i=$((i + 1))
    step=$((i + 1))
    read -r prev prev_step < <($PY -c 'import json,sys; e=[e for e in json.load(sys.stdin) if e["complete"]][-1]; print(e["path"], e["step"])' \
           < <("$OMNI_CKPT" ls --json "$root"))
    args=("$root" "$step" 4 --rows "$ROWS" --attempt "a$i")
    # Every other write is incremental on the previous checkpoint, and every other of those
    # has its base's values (no rank writes a slice: reference shards only); every third
    # goes through a copy-on-write asynchronous writer.
    [ $((i % 2)) -eq 0 ] && args+=(--base "$prev")
    [ $((i % 4)) -eq 0 ] && args+=(--seed "$prev_step")
    [ $((i % 3)) -eq 0 ] && args+=(--cow)
    "$MAKE_TEST_CKPT" "${args[@]}" >/dev/null 2>&1 &
    pid=$!
    delay_ms=$((RANDOM % window_ms))
    sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null

    "$OMNI_CKPT" ls --json "$root" >"$tmp/ls.json" || fail "iteration $i: ls failed"
    read -r latest n_incomplete this_complete < <($PY - "$tmp/ls.json" "$step" <<'PYEOF'
import json, sys
e = json.load(open(sys.argv[1]))
step = int(sys.argv[2])
complete = [x for x in e if x["complete"]]
print(complete[-1]["path"], sum(not x["complete"] for x in e),
      int(any(x["complete"] and x["step"] == step for x in e)))
PYEOF
)
    if [ "$this_complete" -eq 1 ]; then
        committed=$((committed + 1))
        # The machine got faster than the measured window (caches warm, load gone): aim earlier.
        window_ms=$(( window_ms * 4 / 5 > 10 ? window_ms * 4 / 5 : 10 ))
        [ "$latest" = "$root/step-$(printf %010d "$step")" ] || fail "iteration $i: committed step $step is not the newest"
    else
        [ "$latest" = "$prev" ] || fail "iteration $i: newest complete is $latest, expected $prev"
        [ "$n_incomplete" -ge 1 ] && partial_seen=$((partial_seen + 1))
    fi
    # The newest complete checkpoint is intact: every file present, every checksum right.
    "$OMNI_CKPT" verify --quiet "$latest" || fail "iteration $i (killed after $delay_ms ms): $latest does not verify"
    "$OMNI_CKPT" gc "$root" --keep 2 --grace 0 >/dev/null || fail "iteration $i: gc failed"
    "$OMNI_CKPT" ls --json "$root" >"$tmp/ls.json"
    $PY -c 'import json,sys; sys.exit(any(not x["complete"] and not x["name"].startswith("step-") for x in json.load(open(sys.argv[1]))))' "$tmp/ls.json" \
        || fail "iteration $i: gc left a partial checkpoint"
done
# Loading (not just verify) through the library works after the ordeal.
"$OMNI_CKPT" reshard "$latest" --dp 3 -o "$tmp/final-r3" >/dev/null || fail "reshard of $latest failed"
echo "crash: $i kills, $partial_seen left a partial checkpoint, $committed had committed"
[ "$partial_seen" -ge "$KILLS" ] || fail "only $partial_seen of $i kills hit a write in progress"
[ "$fails" -eq 0 ] && echo "crash: all checks passed"
exit $((fails > 0))
