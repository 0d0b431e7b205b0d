#!/usr/bin/env bash
# omni-launch when things go wrong, on a 3-node cluster (launch/test/toy_rank as the ranks):
#  1. a rank that crashes (exit 3 at step 5): its unit is reported lost, the others go on as
#     an unplanned shrink 3 -> 2 and finish, so omni-launch and the job end with status 0
#     (the job recovered; the failure is in the log and the events); with --min-units 3 the
#     job cannot go on and ends with the rank's status 3;
#  2. SIGTERM to omni-launch: the coordinator stops the job at the next boundary, every rank
#     exits 0 on STOP, and omni-launch exits 0 with a "stop" event naming the signal.
. "$(dirname "$0")/lib.sh"
launch=$top_build/launcher/omni-launch
ctl=$top_build/launcher/omni-ctl
toy=$top_build/launcher/launch/test/toy_rank
need_built "$launch" "$ctl" "$toy"
# Every node its own host (network and UTS namespaces): ranks reach the coordinator across hosts.
cluster_acquire 3 0 netns
cd "$work"

# 1. A crashing rank.
cat >lost.sh <<EOS2
#!/bin/bash
"$launch" --units 3 --events "$work/lost.jsonl" --boundary-timeout 20 -- "$toy" 20 100 5
rc=\$?
echo "launch-exit \$rc"
exit \$rc
EOS2
out=$(timeout 180 sbatch --wait -N3 -t 5 -o "$work/lost.out" --parsable lost.sh) ||
  { cat "$work/lost.out" >&2; fail "the job that recovered from a crashing rank failed"; }
jobid=${out%%;*}
grep -E 'launch-exit|generation [0-9]+ ->|lost|went on' "$work/lost.out" || true
expect_eq "omni-launch exit after a crash it recovered from" "$(sed -n 's/^launch-exit //p' "$work/lost.out")" 0
expect_eq "job $jobid state" "$(job_state "$jobid")" COMPLETED
grep -q 'step omni-u0 failed (exit 3); the job went on without units \[0\]' "$work/lost.out" ||
  fail "the recovered failure is not in omni-launch's log"
python3 - "$work/lost.jsonl" <<'PY' || fail "events: $(cat "$work/lost.jsonl")"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
got = [(e["reason"], e["old_world"], e["new_world"]) for e in ev]
assert got == [("initial", 0, 3), ("lost", 3, 2), ("stop", 2, 0)], got
assert ev[1]["new_units"] == [1, 2] and ev[1]["step"] == 5, ev[1]
assert ev[1]["pause_source"] == "ranks", ev[1]  # the survivors reported their rebuild
assert ev[2]["detail"] == "ranks-finished", ev[2]
print("ok: events", got)
PY
grep -q "rank(s) of step omni-u0 reported lost" "$work/lost.out" || fail "the lost rank was not reported"

# 1b. The same crash with --min-units 3: the job cannot go on; its status is the rank's.
sed -e 's/--units 3 /--units 3 --min-units 3 /' -e "s|$work/lost.jsonl|$work/lost-min.jsonl|" lost.sh >lost-min.sh
out=$(timeout 180 sbatch --wait -N3 -t 5 -o "$work/lost-min.out" --parsable lost-min.sh) &&
  fail "the job that lost a rank below its minimum succeeded"
jobid=${out%%;*}
grep -E 'launch-exit|below|stop' "$work/lost-min.out" || true
expect_eq "omni-launch exit below the minimum" "$(sed -n 's/^launch-exit //p' "$work/lost-min.out")" 3
expect_eq "job $jobid state" "$(job_state "$jobid")" FAILED

# 2. SIGTERM.
cat >term.sh <<EOS2
#!/bin/bash
"$launch" --units 2 --events "$work/term.jsonl" -- "$toy" 100000 100 &
pid=\$!
for _ in \$(seq 300); do
  "$ctl" status 2>/dev/null | grep -q '^phase: *running' && break
  sleep 0.1
done
kill -TERM \$pid
wait \$pid
rc=\$?
echo "launch-exit \$rc"
exit \$rc
EOS2
out=$(timeout 180 sbatch --wait -N2 -t 5 -o "$work/term.out" --parsable term.sh) ||
  { cat "$work/term.out" >&2; fail "the job stopped by SIGTERM failed"; }
jobid=${out%%;*}
grep -E 'launch-exit|generation [0-9]+ ->' "$work/term.out" || true
expect_eq "omni-launch exit after SIGTERM" "$(sed -n 's/^launch-exit //p' "$work/term.out")" 0
python3 - "$work/term.jsonl" <<'PY' || fail "events: $(cat "$work/term.jsonl")"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
got = [(e["reason"], e["old_world"], e["new_world"], e["detail"]) for e in ev]
assert got == [("initial", 0, 2, "formed"), ("stop", 2, 0, "signal SIGTERM")], got
print("ok: events", got)
PY
note "ok: a crashed rank is an unplanned shrink the job recovers from (status 0), below the minimum the job's status is the rank's; SIGTERM stops at a boundary"
