#!/bin/bash
# omni-launch without Slurm: a stand-in `srun` (first in PATH) runs each step's tasks locally
# with SLURM_PROCID set, so the supervisor (launch/driver.cc) is exercised by `make check` on
# any machine: formation, a planned shrink 3 -> 1 and grow 1 -> 2 requested with omni-ctl,
# the events file, the exit status, a crashing rank, usage errors. Bounded: about 15 s.
# The same flows on a real cluster: tests/integration/launch-*.sh.
set -u
: "${OMNI_LAUNCH:?}" "${OMNI_CTL:?}" "${TOY_RANK:?}"
fails=0
check() {  # check NAME EXPECTED ACTUAL
    if [ "$2" != "$3" ]; then echo "FAIL: $1: got '$3', expected '$2'"; fails=$((fails + 1));
    else echo "ok: $1"; fi
}
tmp=$(mktemp -d /tmp/omni-launch-test.XXXXXX)
launcher=
cleanup() { [ -n "$launcher" ] && kill "$launcher" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
unset OMNI_COORD_ADDR OMNI_COORD_SECRET OMNI_JOB_DIR SLURM_JOB_ID OMNI_ELASTIC_MIN OMNI_ELASTIC_MAX OMNI_UNIT_SIZE

# The stand-in srun: reads -n, runs the command after the options once per task. Its
# --mpi=list offers pmix unless FAKE_SRUN_NO_PMIX is set (as Debian unstable's 26.05.5).
mkdir "$tmp/bin"
cat >"$tmp/bin/srun" <<'EOS'
#!/bin/bash
if [ "${1-}" = --mpi=list ]; then
  printf 'MPI plugin types are...\n\tnone\n\tpmi2\n'
  [ -n "${FAKE_SRUN_NO_PMIX-}" ] || printf '\tpmix\nspecific pmix plugin versions available: pmix_v4\n'
  exit 0
fi
n=1
while [ $# -gt 0 ]; do
  case $1 in
    -n) n=$2; shift 2 ;;
    -N|-J) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
pids=()
for ((i = 0; i < n; i++)); do SLURM_PROCID=$i "$@" & pids+=($!); done
rc=0
for p in "${pids[@]}"; do wait "$p" || { r=$?; [ $rc -eq 0 ] && rc=$r; }; done
exit $rc
EOS
chmod +x "$tmp/bin/srun"
export PATH="$tmp/bin:$PATH"

"$OMNI_LAUNCH" --help >"$tmp/help" 2>&1; check "--help" 0 $?
grep -q -- "--srun-args" "$tmp/help" || { echo "FAIL: help lists --srun-args"; fails=$((fails + 1)); }
"$OMNI_LAUNCH" --units 2 >/dev/null 2>&1; check "no PROGRAM" 2 $?
"$OMNI_LAUNCH" --units 0 -- true >/dev/null 2>&1; check "--units 0" 2 $?
"$OMNI_LAUNCH" --bind 0.0.0.0 --units 1 -- true >"$tmp/err" 2>&1; check "--bind 0.0.0.0" 2 $?
grep -q wildcard "$tmp/err" || { echo "FAIL: wildcard message"; fails=$((fails + 1)); }
"$OMNI_LAUNCH" --units 2 --srun-args '--ntasks=3' -- true >"$tmp/err" 2>&1; check "reserved srun option" 2 $?
grep -q -- "--srun-args" "$tmp/err" || { echo "FAIL: --srun-args message"; fails=$((fails + 1)); }
"$OMNI_LAUNCH" --units 2 -- true >"$tmp/err" 2>&1; check "outside a job without --job-dir" 1 $?
"$OMNI_LAUNCH" --units 2 --unit-size 2 --srun-args '--gres=gpu:2' --dry-run -- ./train --lr 1 >"$tmp/dry" 2>&1
check "--dry-run" 0 $?
check "--dry-run lines" 2 "$(grep -c 'srun --mpi=pmix --no-kill --kill-on-bad-exit=0 --export=ALL -J omni-u[01] -n 2 --gres=gpu:2 .*--exec-task -- ./train --lr 1$' "$tmp/dry")"
# Without PMIx: auto where srun --mpi=list offers none, OMNI_LAUNCH_MPI=none, --mpi none (which
# wins over the variable). Fails if auto stopped asking srun, or a setting were ignored.
FAKE_SRUN_NO_PMIX=1 "$OMNI_LAUNCH" --units 2 --dry-run -- ./train >"$tmp/dry" 2>&1
check "--mpi auto without pmix" 2 "$(grep -c 'srun --mpi=none --no-kill .* -J omni-u[01] -n 1 .*--exec-task -- ./train$' "$tmp/dry")"
grep -q 'srun --mpi=list offers no pmix' "$tmp/dry" || { echo "FAIL: --mpi auto says why it chose none"; fails=$((fails + 1)); }
OMNI_LAUNCH_MPI=none "$OMNI_LAUNCH" --units 1 --dry-run -- ./train >"$tmp/dry" 2>&1
check "OMNI_LAUNCH_MPI=none" 1 "$(grep -c 'srun --mpi=none ' "$tmp/dry")"
OMNI_LAUNCH_MPI=none "$OMNI_LAUNCH" --mpi pmix --units 1 --dry-run -- ./train >"$tmp/dry" 2>&1
check "--mpi pmix over OMNI_LAUNCH_MPI" 1 "$(grep -c 'srun --mpi=pmix ' "$tmp/dry")"
"$OMNI_LAUNCH" --mpi pmi2 --units 1 --dry-run -- ./train >"$tmp/err" 2>&1; check "--mpi pmi2" 2 $?
grep -q -- "--mpi 'pmi2': expected auto, pmix or none" "$tmp/err" || { echo "FAIL: --mpi message"; fails=$((fails + 1)); }
OMNI_LAUNCH_MPI=yes "$OMNI_LAUNCH" --units 1 --dry-run -- ./train >"$tmp/err" 2>&1; check "OMNI_LAUNCH_MPI=yes" 2 $?
grep -q "OMNI_LAUNCH_MPI 'yes'" "$tmp/err" || { echo "FAIL: OMNI_LAUNCH_MPI message"; fails=$((fails + 1)); }
OMNI_MP_WIREUP=pmix "$OMNI_LAUNCH" --mpi none --units 1 --dry-run -- ./train >"$tmp/err" 2>&1; check "--mpi none with OMNI_MP_WIREUP=pmix" 2 $?
grep -q "OMNI_MP_WIREUP=pmix" "$tmp/err" || { echo "FAIL: --mpi none / OMNI_MP_WIREUP message"; fails=$((fails + 1)); }

# Reshape 3 -> 1 -> 2 with omni-ctl, then the ranks finish on their own. 200 steps of 50 ms:
# both changes must land before the last step, and on a loaded machine each poll below
# (omni-ctl and python3) can take a few hundred milliseconds (with 80 steps this failed while
# two test suites shared two cores).
dir="$tmp/job"
TOY_BATCH=48/4 "$OMNI_LAUNCH" --bind 127.0.0.1 --job-dir "$dir" --units 3 --events "$tmp/ev.jsonl" \
    --metrics-file "$tmp/job.prom" -- "$TOY_RANK" 200 50 >"$tmp/run.out" 2>"$tmp/run.err" &
launcher=$!
export OMNI_JOB_DIR="$dir"
wait_units() {
    for _ in $(seq 100); do
        "$OMNI_CTL" status --json >"$tmp/st.json" 2>/dev/null &&
            python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); sys.exit(0 if s["phase"]=="running" and s["units"]==int(sys.argv[2]) and s["target_units"] is None else 1)' \
                "$tmp/st.json" "$1" && return 0
        sleep 0.05
    done
    return 1
}
wait_units 3; check "formed with 3 units" 0 $?
check "job files are private" "600 600" "$(stat -c %a "$dir/secret" "$dir/coordinator" | tr '\n' ' ' | sed 's/ $//')"
"$OMNI_CTL" reshape --units 1 >/dev/null; wait_units 1; check "shrunk to 1 unit" 0 $?
"$OMNI_CTL" reshape --units 2 >/dev/null; wait_units 2; check "grew to 2 units" 0 $?
# The metrics file (rewritten every second): the exposition format, and the figures of the
# job as it is now: 2 units, GA = 48 / (4 x 2), two planned changes.
sleep 1.2
python3 - "$tmp/job.prom" <<'PY' || fails=$((fails + 1))
import re, sys
text = open(sys.argv[1]).read()
samples, declared = {}, {}
for line in text.splitlines():
    m = re.fullmatch(r"# TYPE (omni_[a-z_]+) (gauge|counter)", line)
    if m:
        declared[m.group(1)] = m.group(2)
        continue
    if line.startswith("# HELP omni_"):
        continue
    m = re.fullmatch(r'(omni_[a-z_]+)(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? (\S+)', line)
    assert m, "not a sample line: %r" % line
    assert m.group(1) in declared, "sample before its TYPE: %r" % line
    samples[m.group(1) + (m.group(2) or "")] = float(m.group(4))
assert samples["omni_up"] == 1 and samples["omni_units"] == 2 and samples["omni_world_size"] == 2, samples
assert samples["omni_global_batch"] == 48 and samples["omni_grad_accum"] == 6, samples
assert samples['omni_changes_total{reason="planned"}'] == 2, samples
assert samples['omni_changes_total{reason="formed"}'] == 1, samples
assert samples["omni_samples_per_second"] > 0 and samples["omni_step"] > 0, samples
assert declared["omni_changes_total"] == "counter", declared
print("ok: metrics file", len(samples), "samples")
PY
"$OMNI_CTL" status >"$tmp/st.txt" 2>&1
grep -q "^batch: *global 48, micro 4, gradient accumulation 6$" "$tmp/st.txt" || { echo "FAIL: status batch line"; cat "$tmp/st.txt"; fails=$((fails + 1)); }
grep -q "^throughput: *[0-9.]* samples/s$" "$tmp/st.txt" || { echo "FAIL: status throughput line"; fails=$((fails + 1)); }
grep -q "^changes: *formed 1 planned 2$" "$tmp/st.txt" || { echo "FAIL: status changes line"; fails=$((fails + 1)); }
wait "$launcher"; check "omni-launch exit" 0 $?; launcher=
check "metrics file removed at the end" no "$([ -e "$tmp/job.prom" ] && echo yes || echo no)"
python3 - "$tmp/ev.jsonl" <<'PY' || { fails=$((fails + 1)); cat "$tmp/run.err"; }
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
got = [(e["reason"], e["old_world"], e["new_world"]) for e in ev]
assert got == [("initial", 0, 3), ("planned", 3, 1), ("planned", 1, 2), ("stop", 2, 0)], got
assert ev[2]["new_units"] == [0, 3], ev[2]
assert [e["pause_source"] for e in ev[1:3]] == ["ranks", "ranks"], ev
print("ok: events", got)
PY
grep -q "generation 2 -> 3: world 1 -> 2 (planned" "$tmp/run.err" || { echo "FAIL: change not logged"; fails=$((fails + 1)); }
check "job files removed at the end" "no no" "$([ -e "$dir/secret" ] && echo yes || echo no) $([ -e "$dir/coordinator" ] && echo yes || echo no)"

# A rank that crashes (unit 0 exits 3 at step 4): lost; unit 1 goes on alone and finishes,
# so the job recovered and its status is 0.
# These ranks do not report ready: the lost event carries omni-launch's own estimate.
TOY_READY=0 "$OMNI_LAUNCH" --bind 127.0.0.1 --job-dir "$tmp/job2" --units 2 --events "$tmp/ev2.jsonl" \
    -- "$TOY_RANK" 10 20 4 >/dev/null 2>"$tmp/run2.err"
check "exit status after a crash the job recovered from" 0 $?
check "lost event" '"lost" "poll"' "$(sed -n 2p "$tmp/ev2.jsonl" | python3 -c 'import json,sys; e=json.load(sys.stdin); print(json.dumps(e["reason"]), json.dumps(e["pause_source"]))')"
grep -q "failed (exit 3); the job went on without units \[0\]" "$tmp/run2.err" || { echo "FAIL: recovered failure not logged"; fails=$((fails + 1)); }
# The same with --min-units 2: nobody can go on; the status is the crashed rank's 3.
"$OMNI_LAUNCH" --bind 127.0.0.1 --job-dir "$tmp/job3" --units 2 --min-units 2 --events "$tmp/ev3.jsonl" \
    -- "$TOY_RANK" 10 20 4 >/dev/null 2>"$tmp/run3.err"
check "exit status of a crash below the minimum" 3 $?

[ "$fails" -eq 0 ] && echo "PASS" || echo "$fails failure(s)"
[ "$fails" -eq 0 ]
