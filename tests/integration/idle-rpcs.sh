#!/usr/bin/env bash
# slurmctld's load from an elastic job that trains without change, on a cluster of this
# test's own (sdiag counts every client's RPCs; tests may run side by side on the shared
# one): omni-train-demo under omni-launch, 2 units on 2 exclusive nodes, no policy, grown to
# 3 units by `omni-ctl grow`: a satellite job on the third node, whose omni-launch runs the
# new unit. Checked:
#  - over 20 s in which nothing changes, slurmctld gets at most 3 RPCs in all, from the job,
#    its satellite and their omni-launches together (a look at the joined satellite every
#    30 s is one squeue; a job read, omni-launch's slow safety look, is 3 RPCs). omni-launch
#    once read the job every 3 s for job_submit/omni's records, 20 RPCs in such a window
#    (issue #46: 1 RPC/s per idle job), and the satellite's read its own job every 2 s for
#    a preemption, 30 more (it learns of one by SIGURG now: launch/driver.cc,
#    watch_preemption); either poll put back makes this check fail (tried with the
#    satellite's: 32 RPCs, 11 job reads of 3 RPCs each, where 2 are measured without);
#  - a plain `scontrol update NumNodes=1` then starts the drain within 10 s: job_submit/omni
#    sends SIGURG to the batch script's process group and omni-launch reads the job at once
#    (about 0.4 s measured). Without the signal omni-launch would only find the record at
#    its next safety look, 120 s later, and the check fails;
#  - the job ends with status 0, at 2 units (the satellite's and one of its own), with the
#    planned changes in its events, and no satellite outlives it.
. "$(dirname "$0")/lib.sh"
train_commands
# Where job_submit/omni is not built (Debian unstable's 26.05.5: no source tree of that
# release) there is no deferred shrink to learn of: the idle window is checked all the same,
# and the shrink after it is omni-ctl's (its drain time is then not the SIGURG's, not checked).
cluster_acquire 3 0 local --no-accounting
if [ -f "$top_build/job_submit/.libs/job_submit_omni.so" ]; then
  submit=1 shrink="scontrol update JobId=\$SLURM_JOB_ID NumNodes=1"
  grep -qx "JobSubmitPlugins=omni" "$CLUSTER_DIR/etc/slurm.conf" ||
    fail "the cluster in $CLUSTER_DIR does not load job_submit/omni"
else
  submit=0 shrink="\"$ctl\" shrink --units 2 --wait 60"
  note "job_submit/omni is not built (configure: $(sed -n 's|^  job_submit/omni built *||p' "$top_build/config.log" 2>/dev/null | tail -n 1)): no deferred shrink; the shrink is omni-ctl's and its drain time is not checked"
fi
cd "$work"
window=20

elastic_job idle.sh idle "--units 2" "--steps 400 --pace-ms 100 --global-batch 48 --micro-batch 4" <<EOS
at_step 5 || exit 10
"$ctl" grow --units 3 --wait 60 >"$work/grow-ctl.out" 2>&1
echo "grow-exit \$?"
sdiag -r >/dev/null || exit 11
sleep $window
sdiag >"$work/sdiag.txt" || exit 12
t0=\$(date +%s%N)
$shrink >"$work/scontrol.out" 2>&1
echo "scontrol-exit \$?"
for _ in \$(seq 200); do
  grep -q 'world 3 -> 2 (planned' "$work/idle.out" && break
  sleep 0.05
done
echo "drain-ms \$(( (\$(date +%s%N) - t0) / 1000000 ))"
EOS
job=$(timeout 180 sbatch --wait --parsable -N2 --exclusive --ntasks-per-node=1 -t 4 --omni-elastic=1:3 \
  -o "$work/idle.out" idle.sh) || { cat "$work/idle.out" "$work"/slurm-*.out >&2; fail "the job failed"; }
job=${job%%;*}
# Shown for the log only; '|| true': a job that printed none of these lines fails the checks below.
grep -E '^(grow-exit|scontrol-exit|drain-ms|launch-exit)|world [0-9]+ -> [0-9]+|satellite' "$work/idle.out" || true

expect_eq "omni-ctl grow --units 3 exit" "$(sed -n 's/^grow-exit //p' "$work/idle.out")" 0

expect_eq "omni-launch exit" "$(sed -n 's/^launch-exit //p' "$work/idle.out")" 0
expect_eq "shrink ($shrink) exit" "$(sed -n 's/^scontrol-exit //p' "$work/idle.out")" 0
# Every RPC slurmctld got in the window, by type, but sdiag's own.
rpcs=$(sed -n '/by message type/,/by user/p' "$work/sdiag.txt" |
  awk '/count:/ && !/REQUEST_STATS_INFO/ { n = $0; sub(/.*count:/, "", n); sub(/ .*/, "", n); s += n; print "  " $1, n > "/dev/stderr" } END { print s + 0 }')
note "slurmctld RPCs in $window s of an idle elastic job: $rpcs"
[ "$rpcs" -le 3 ] || fail "$rpcs RPCs in $window s of an idle job (at most 3: one safety look)"
ms=$(sed -n 's/^drain-ms //p' "$work/idle.out")
grep -q 'world 3 -> 2 (planned' "$work/idle.out" || fail "the deferred shrink never drained the unit"
note "shrink ($([ $submit = 1 ] && echo "scontrol update" || echo "omni-ctl")) to the planned change: $ms ms"
[ $submit = 0 ] || [ "$ms" -lt 10000 ] || fail "the drain began $ms ms after scontrol update (SIGURG not acted on?)"
/usr/bin/python3 - "$work/idle-events.jsonl" <<'PY' || fail "events (above)"
import json, sys
got = [(e["reason"], e["old_world"], e["new_world"]) for e in map(json.loads, open(sys.argv[1]))]
assert got == [("initial", 0, 2), ("planned", 2, 3), ("planned", 3, 2), ("stop", 2, 0)], got
print("ok: events", got)
PY
expect_eq "omni-sat-$job jobs after the job" "$(squeue -h --name "omni-sat-$job" -o %i | wc -l)" 0
note "ok: an idle job with a joined satellite costs slurmctld $rpcs RPCs in $window s; shrink acted on in $ms ms"
