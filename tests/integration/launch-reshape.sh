#!/usr/bin/env bash
# omni-launch in a 4-node batch job (one core per node): 4 units of 1 rank (launch/test/toy_rank, which speaks only the
# coordinator protocol) run ~150 boundaries; from inside the job, omni-ctl reshapes to 2
# units, then to 3 (a joining srun step with a fresh unit id). Checks: the events file shows
# initial 0 -> 4, planned 4 -> 2, planned 2 -> 3 and the end; the job and omni-launch exit 0;
# the coordinator listens only on the batch node's address (every node its own host here:
# omni-cluster --hosts netns), never on a wildcard; no slurm-omni program listens anywhere
# else on any node;
# a connection with a wrong secret is refused and logged; the job directory omni-launch made
# is removed when it ends.
. "$(dirname "$0")/lib.sh"
launch=$top_build/launcher/omni-launch
ctl=$top_build/launcher/omni-ctl
toy=$top_build/launcher/launch/test/toy_rank
need_built "$launch" "$ctl" "$toy"
cluster_acquire 4 0 netns
cd "$work"

cat >job.sh <<EOS
#!/bin/bash
# Written by launch-reshape.sh. Runs omni-launch and, beside it, drives two reshapes.
set -u
jobdir="/tmp/omni-\$(id -u)/job-\$SLURM_CLUSTER_NAME-\$SLURM_JOB_ID"
[ -e "\$jobdir" ] && echo "job-dir existed"   # left by an earlier cluster with the same job ids
"$launch" --units 4 --events "$work/events.jsonl" --boundary-timeout 20 \\
  -- "$toy" 150 100 &
launch_pid=\$!
# wait_units K: until the coordinator reports generation running with K units (bounded).
wait_units() {
  for _ in \$(seq 300); do
    "$ctl" status --json >"$work/status.json" 2>/dev/null &&
      python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); sys.exit(0 if s["phase"]=="running" and s["units"]==int(sys.argv[2]) and s["target_units"] is None else 1)' \\
        "$work/status.json" "\$1" && { echo "reached \$1 units"; return 0; }
    sleep 0.1
  done
  echo "never reached \$1 units"; return 1
}
wait_units 4 || exit 10
echo "batch-node \$SLURMD_NODENAME"
port=\$(sed 's/.*://' "\$jobdir/coordinator")
ss -ltnp "( sport = :\$port )" >"$work/ss.txt"
# Every node's listening sockets, named by node.
srun --overlap -N4 --ntasks-per-node=1 bash -c 'ss -Htanp | sed "s/^/\$SLURMD_NODENAME /"' >"$work/sockets.txt"
# A request with a wrong secret, through a directory naming the real coordinator.
mkdir -m 700 "$work/other"
printf '%064d\n' 7 >"$work/other/secret"; chmod 600 "$work/other/secret"
cp "\$jobdir/coordinator" "$work/other/coordinator"
"$ctl" status --job-dir "$work/other" >"$work/refused.txt" 2>&1; echo "wrong-secret-exit \$?"
"$ctl" reshape --units 2 || exit 11
wait_units 2 || exit 12
"$ctl" reshape --units 3 || exit 13
wait_units 3 || exit 14
"$ctl" reshape --units 5 >"$work/toomany.txt" 2>&1; echo "too-many-exit \$?"
wait \$launch_pid
rc=\$?
echo "launch-exit \$rc"
[ -e "\$jobdir" ] && echo "job-dir left" || echo "job-dir removed"
exit \$rc
EOS
chmod +x job.sh
out=$(timeout 240 sbatch --wait -N4 -t 5 -o "$work/job.out" --parsable job.sh) ||
  { cat "$work/job.out" >&2; fail "the job failed (sbatch: $out)"; }
jobid=${out%%;*}
grep -E '^(reached|launch-exit|wrong-secret|too-many)|generation [0-9]+ ->' "$work/job.out" || true
expect_eq "omni-launch exit" "$(sed -n 's/^launch-exit //p' "$work/job.out")" 0
expect_eq "job $jobid state" "$(job_state "$jobid")" COMPLETED
# The job directory omni-launch made (secret, coordinator) is gone with it.
if grep -q '^job-dir existed' "$work/job.out"; then
  note "the job directory existed before the job; not checking that omni-launch removed it"
else
  expect_eq "omni-launch's job directory after the job" "$(sed -n 's/^job-dir //p' "$work/job.out")" removed
fi

# Events: initial 0 -> 4, planned 4 -> 2, planned 2 -> 3, then the end (3 -> 0).
python3 - "$work/events.jsonl" <<'PY' || fail "events file: $(cat "$work/events.jsonl")"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
got = [(e["reason"], e["old_world"], e["new_world"]) for e in ev]
want = [("initial", 0, 4), ("planned", 4, 2), ("planned", 2, 3), ("stop", 3, 0)]
assert got == want, got
assert [e["generation"] for e in ev] == [1, 2, 3, 3], ev
assert ev[2]["new_units"] == [0, 1, 4], ev[2]          # the joiner has a fresh unit id
assert ev[1]["old_units"] == [0, 1, 2, 3] and ev[1]["new_units"] == [0, 1], ev[1]
assert ev[3]["detail"] == "ranks-finished", ev[3]
for e in ev:
    assert e["time"].endswith("Z") and e["pause_ms"] >= 0 and e["resolution_ms"] > 0, e
# The changes' pauses are the ranks' (every new member reported ready), not omni-launch's polls.
assert [e["pause_source"] for e in ev] == ["launch", "ranks", "ranks", "poll"], ev
print("ok: events", got)
PY
grep -q 'omni-launch.*generation 1 -> 2: world 4 -> 2 (planned' "$work/job.out" ||
  fail "no generation change logged on stderr"
expect_eq "joining rank admitted" \
  "$(grep -c 'toy u4.s0: generation 3 rank 2 of 3' "$work/job.out")" 1
expect_eq "ranks that left at the shrink" "$(grep -c 'toy u[23].s0: leaves at step' "$work/job.out")" 2

# Listening only on the batch node's address.
cat "$work/ss.txt"
batch=$(sed -n 's/^batch-node //p' "$work/job.out")
baddr=$(node_addr "$batch")
[ -n "$baddr" ] || fail "no NodeAddr for the batch node '$batch'"
grep -qF "LISTEN" "$work/ss.txt" || fail "the coordinator is not listening"
awk '$1 == "LISTEN" { print $4 }' "$work/ss.txt" | grep -vE "^${baddr//./\\.}:[0-9]+\$" &&
  fail "coordinator listens on a wildcard or another address than $baddr"
grep -q 'omni-launch' "$work/ss.txt" || fail "the listener is not omni-launch's"
check_sockets "$work/sockets.txt"
if [ "$CLUSTER_HOSTS" = netns ]; then
  expect_eq "the coordinator's address" "$(awk '$1 == "LISTEN" { print $4; exit }' "$work/ss.txt" | sed 's/:[0-9]*$//')" "$baddr"
  # The ranks on the three other hosts reached the coordinator across the bridge.
  expect_eq "other hosts connected to the coordinator" "$(remote_peers "$work/sockets.txt" omni-launch | wc -l)" 3
fi

expect_eq "wrong secret refused (omni-ctl exit)" "$(sed -n 's/^wrong-secret-exit //p' "$work/job.out")" 1
grep -q refused "$work/refused.txt" || fail "omni-ctl did not report the refusal: $(cat "$work/refused.txt")"
grep -q 'refused a connection from .*: its handshake failed (no or a wrong job secret' "$work/job.out" || fail "the coordinator did not log the refusal"
expect_eq "reshape beyond --max-units (omni-ctl exit)" "$(sed -n 's/^too-many-exit //p' "$work/job.out")" 1

# One step per unit: units 0-3 at the start, unit 4 joining; the leavers' steps ended at the
# shrink (which is what let the joiner's step have their CPUs in a job of 4 cores).
sacct -n -P -j "$jobid" -o JobName,NTasks,State | grep '^omni-' | sort >"$work/steps.txt"
cat "$work/steps.txt"
expect_eq "srun steps" "$(tr '\n' ' ' <"$work/steps.txt")" \
  "omni-u0|1|COMPLETED omni-u1|1|COMPLETED omni-u2|1|COMPLETED omni-u3|1|COMPLETED omni-u4|1|COMPLETED "
note "ok: job $jobid ran 4 -> 2 -> 3 units under omni-launch and exited 0"
