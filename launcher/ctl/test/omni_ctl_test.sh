#!/bin/bash
# omni-ctl against a real coordinator on 127.0.0.1 (coord/test/coord_serve with simulated ranks):
# usage errors exit 2, failures exit 1, status (text and --json), a planned shrink that the
# ranks apply at their next boundary, a wrong secret refused. Bounded: about 5 s.
set -u
: "${OMNI_CTL:?}" "${COORD_SERVE:?}"
fails=0
check() {  # check NAME EXPECTED_RC ACTUAL_RC
    if [ "$2" != "$3" ]; then echo "FAIL: $1: exit $3, expected $2"; fails=$((fails + 1));
    else echo "ok: $1"; fi
}
tmp=$(mktemp -d /tmp/omni-ctl-test.XXXXXX)
server=
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
unset OMNI_COORD_ADDR OMNI_COORD_SECRET OMNI_JOB_DIR SLURM_JOB_ID

"$OMNI_CTL" --help >"$tmp/help" 2>&1; check "--help" 0 $?
grep -q "reshape --units K" "$tmp/help" || { echo "FAIL: help text"; fails=$((fails + 1)); }
"$OMNI_CTL" >/dev/null 2>&1; check "no command" 2 $?
"$OMNI_CTL" frobnicate >/dev/null 2>&1; check "unknown command" 2 $?
"$OMNI_CTL" reshape >/dev/null 2>&1; check "reshape without --units" 2 $?
"$OMNI_CTL" reshape --units 0 >/dev/null 2>&1; check "--units 0" 2 $?
"$OMNI_CTL" reshape --units 3x >/dev/null 2>&1; check "--units 3x" 2 $?
"$OMNI_CTL" status --units 3 >/dev/null 2>&1; check "status --units" 2 $?
"$OMNI_CTL" status --bogus >/dev/null 2>&1; check "unknown option" 2 $?
"$OMNI_CTL" status --address tcp://0.0.0.0:1 >/dev/null 2>&1; check "wildcard address" 2 $?
"$OMNI_CTL" shrink >/dev/null 2>&1; check "shrink without --units or --nodes" 2 $?
"$OMNI_CTL" shrink --units 2 --nodes n2 >/dev/null 2>&1; check "shrink with both" 2 $?
"$OMNI_CTL" shrink --units 2 >"$tmp/err" 2>&1; check "shrink outside a job" 2 $?
grep -q "run it inside the job, or name it with --job (from outside) or --job-id" "$tmp/err" || { echo "FAIL: shrink without a job: $(cat "$tmp/err")"; fails=$((fails + 1)); }
"$OMNI_CTL" shrink --nodes 'n[' --job-id 7 >"$tmp/err" 2>&1; check "shrink --nodes n[" 2 $?
grep -q "expected a Slurm host list" "$tmp/err" || { echo "FAIL: bad host list message: $(cat "$tmp/err")"; fails=$((fails + 1)); }
"$OMNI_CTL" shrink --units 2 --job-id 0 >/dev/null 2>&1; check "shrink --job-id 0" 2 $?
"$OMNI_CTL" shrink --units 2 --job-id 7 --wait 0 >/dev/null 2>&1; check "shrink --wait 0" 2 $?
"$OMNI_CTL" status --nodes n2 >/dev/null 2>&1; check "status --nodes" 2 $?
"$OMNI_CTL" reshape --units 2 --wait 5 >/dev/null 2>&1; check "reshape --wait" 2 $?
"$OMNI_CTL" status >"$tmp/err" 2>&1; check "no job to talk to" 1 $?
grep -q "OMNI_JOB_DIR" "$tmp/err" || { echo "FAIL: message names OMNI_JOB_DIR"; fails=$((fails + 1)); }

dir="$tmp/job"
"$COORD_SERVE" "$dir" 2 1 4 20 >"$tmp/endpoint" 2>"$tmp/server.log" &
server=$!
for _ in $(seq 50); do [ -s "$tmp/endpoint" ] && break; sleep 0.1; done
export OMNI_JOB_DIR="$dir"

# Wait until the simulated ranks formed generation 1.
for _ in $(seq 50); do
    "$OMNI_CTL" status --json >"$tmp/st.json" 2>/dev/null && grep -q '"phase": "running"' "$tmp/st.json" && break
    sleep 0.1
done
"$OMNI_CTL" status >"$tmp/st.txt" 2>&1; check "status" 0 $?
grep -q "^generation: *1$" "$tmp/st.txt" || { echo "FAIL: status text"; cat "$tmp/st.txt"; fails=$((fails + 1)); }
grep -q "^world: *2 ranks$" "$tmp/st.txt" || { echo "FAIL: status world"; fails=$((fails + 1)); }
"$OMNI_CTL" status --json >"$tmp/st.json" 2>&1; check "status --json" 0 $?
python3 - "$tmp/st.json" <<'PY' || fails=$((fails + 1))
import json, sys
s = json.load(open(sys.argv[1]))
assert s["phase"] == "running" and s["units"] == 2 and s["world"] == 2, s
assert s["min_units"] == 1 and s["max_units"] == 4, s
assert [m["rank"] for m in s["members"]] == [0, 1], s
# Every field omni-ctl(1) documents, and no other.
documented = {"phase", "generation", "units", "world", "unit_size", "min_units", "max_units",
              "target_units", "target_leave", "target_via", "boundary_step", "arrived", "last_step",
              "pending_joiners", "lost", "unit_ids", "members", "last_decision", "last_change",
              "change_pause_ms", "global_batch", "micro_batch", "mp", "grad_accum", "samples_per_s",
              "changes", "last_resize", "unit_nodes", "last_checkpoint", "kv", "coordinator"}
assert set(s) == documented, (sorted(set(s) - documented), sorted(documented - set(s)))
assert all(set(m) == {"id", "unit", "slot", "rank", "node"} for m in s["members"]), s["members"]
assert s["changes"] == {"formed": 1}, s["changes"]
assert s["last_resize"] is None and s["last_checkpoint"] is None, s  # none yet
print("ok: status --json fields")
PY

"$OMNI_CTL" reshape --units 5 >"$tmp/err" 2>&1; check "reshape outside the range" 1 $?
grep -q "outside the elastic range 1..4" "$tmp/err" || { echo "FAIL: range message"; cat "$tmp/err"; fails=$((fails + 1)); }
"$OMNI_CTL" reshape --units 1 >"$tmp/out" 2>&1; check "reshape --units 1" 0 $?
shrunk=no
for _ in $(seq 50); do
    "$OMNI_CTL" status --json >"$tmp/st.json" 2>/dev/null
    if python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); sys.exit(0 if s["units"]==1 and s["generation"]==2 and s["world"]==1 and s["change_pause_ms"] is not None else 1)' "$tmp/st.json"; then
        shrunk=yes; break
    fi
    sleep 0.1
done
check "ranks applied the shrink at a boundary and reported ready" yes $shrunk
"$OMNI_CTL" status >"$tmp/st.txt" 2>&1
grep -q "^last change: *reshaped at generation 1 step [0-9]* (planned) -> generation 2, world 1$" "$tmp/st.txt" ||
    { echo "FAIL: last change line"; cat "$tmp/st.txt"; fails=$((fails + 1)); }
# The simulated ranks report ready after every change, as libomni does: the pause is known.
grep -q "^change pause: *[0-9][0-9]* ms (decision to every rank ready)$" "$tmp/st.txt" ||
    { echo "FAIL: change pause line"; cat "$tmp/st.txt"; fails=$((fails + 1)); }

# The address from the environment, the secret from a directory with another secret: refused.
other="$tmp/other"
mkdir -m 700 "$other"
printf '%064d\n' 7 >"$other/secret"; chmod 600 "$other/secret"
cp "$dir/coordinator" "$other/coordinator"
"$OMNI_CTL" status --job-dir "$other" >"$tmp/err" 2>&1; check "wrong secret" 1 $?
grep -q "refused" "$tmp/err" || { echo "FAIL: refusal message"; cat "$tmp/err"; fails=$((fails + 1)); }
# Logged when the coordinator sees the connection close, a poll (100 ms) after omni-ctl may.
for _ in $(seq 20); do grep -q "refused a connection from .*: its handshake failed (no or a wrong job secret" "$tmp/server.log" && break; sleep 0.1; done
grep -q "refused a connection from .*: its handshake failed (no or a wrong job secret" "$tmp/server.log" || { echo "FAIL: refusal not logged"; fails=$((fails + 1)); }
# Environment variables work as well as the directory.
OMNI_COORD_ADDR=$(cat "$dir/coordinator") OMNI_COORD_SECRET=$(cat "$dir/secret") OMNI_JOB_DIR= \
    "$OMNI_CTL" status >/dev/null 2>&1; check "address and secret from the environment" 0 $?
chmod 644 "$dir/secret"
"$OMNI_CTL" status >"$tmp/err" 2>&1; check "secret readable by others" 1 $?
chmod 600 "$dir/secret"

kill "$server"; wait "$server"; check "coordinator exits cleanly on SIGTERM" 0 $?; server=
"$OMNI_CTL" status --timeout 500 >/dev/null 2>&1; check "coordinator gone" 1 $?

[ "$fails" -eq 0 ] && echo "PASS" || echo "$fails failure(s)"
[ "$fails" -eq 0 ]
