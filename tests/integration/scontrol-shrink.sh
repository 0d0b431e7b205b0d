#!/usr/bin/env bash
# A plain `scontrol update` shrink of a running omni job, made graceful by job_submit/omni, on
# the local cluster (four hosts): omni-train-demo under omni-launch with 4 units of one rank
# on 4 nodes. At step 14 `scontrol update JobId=J NumNodes=2`, at step 30
# `scontrol update JobId=J NodeList=<batch host>`. Checked:
#  - scontrol says nothing and exits 0; the plugin records the nodes Slurm would release
#    (n3,n4: the batch host and the first other node stay) in the job's SystemComment
#    instead of releasing them, and the job still has 4 nodes right after;
#  - omni-launch drains the units on those nodes at a boundary (a planned change, no rewind,
#    no step recomputed) and then gives exactly those nodes back; the record is gone, the
#    nodes are idle in sinfo, and omni-ctl status calls the resize "scontrol";
#  - the same for NodeList= (2 -> 1 unit);
#  - another user's `scontrol update NumNodes=1` (as nobody, before) is refused by slurmctld
#    and leaves no record: the job keeps its 4 nodes and units;
#  - per-step loss, LR and samples bitwise those of a static run, every sample once per
#    epoch, no step trained twice; events initial 4, planned 4 -> 2, planned 2 -> 1, stop.
. "$(dirname "$0")/lib.sh"
train_commands
need_plugin job_submit "scontrol-shrink-lost.sh covers the path without it"
cluster_acquire 4 0 netns
grep -qx "JobSubmitPlugins=omni" "$CLUSTER_DIR/etc/slurm.conf" ||
  fail "the cluster in $CLUSTER_DIR does not load job_submit/omni"
cd "$work"
# 15 steps per epoch (480 / 32), 4 epochs; d = 4, 2 and 1 keep GA whole.
train="--steps 60 --dataset-size 480 --lr 0.05 --warmup 5 --global-batch 32 --micro-batch 4"

write_static_job static.sh 4 "$train"
mkdir -p "$work/samples"
elastic_job sc.sh sc "--units 4" "$train --pace-ms 150 --sample-log $work/samples" <<EOS
at_step 10 || exit 10
# Another user may not shrink the job: slurmctld refuses, and no record is left behind.
runuser -u nobody -- scontrol update JobId=\$SLURM_JOB_ID NumNodes=1 >"$work/scontrol-nobody.out" 2>&1
echo "scontrol-nobody-exit \$?"
scontrol show job \$SLURM_JOB_ID >"$work/job-nobody.txt"
at_step 14 || exit 11
scontrol update JobId=\$SLURM_JOB_ID NumNodes=2 >"$work/scontrol-1.out" 2>&1
echo "scontrol-1-exit \$?"
scontrol show job \$SLURM_JOB_ID >"$work/job-deferred.txt"
units_are 2; echo "units-2-exit \$?"
for _ in \$(seq 100); do
  scontrol show job \$SLURM_JOB_ID | grep -q ' NodeList=n\[1-2\]' && break
  sleep 0.1
done
scontrol show job \$SLURM_JOB_ID >"$work/job-released.txt"
sinfo -h -N -p omni -t idle -o %N | sort -u >"$work/idle.txt"
"$ctl" status --json >"$work/status-2.json"
at_step 30 || exit 12
scontrol update JobId=\$SLURM_JOB_ID NodeList=\$(hostname) >"$work/scontrol-2.out" 2>&1
echo "scontrol-2-exit \$?"
units_are 1; echo "units-1-exit \$?"
for _ in \$(seq 100); do
  [ "\$(scontrol show job \$SLURM_JOB_ID | sed -n 's/^ *NodeList=//p')" = "\$(hostname)" ] && break
  sleep 0.1
done
scontrol show job \$SLURM_JOB_ID >"$work/job-one.txt"
"$ctl" status --json >"$work/status-1.json"
EOS
out=$(timeout 240 sbatch --wait -N4 -t 5 -o "$work/static.out" --parsable static.sh) ||
  { cat "$work/static.out" >&2; fail "the static job failed"; }
job=$(timeout 300 sbatch --wait -N4 --exclusive --ntasks-per-node=1 -t 5 --omni-elastic=1:4 -o "$work/sc.out" --parsable sc.sh) ||
  { cat "$work/sc.out" >&2; fail "the job shrunk by scontrol failed"; }
job=${job%%;*}
# Shown for the log only; '|| true': a job that printed none of these lines fails the checks below.
grep -E '^(scontrol-|units-|launch-exit|shrink|released)|Slurm was asked|rewound|world [0-9]+ -> [0-9]+' "$work/sc.out" || true

for n in 1 2; do
  expect_eq "scontrol update $n exit" "$(sed -n "s/^scontrol-$n-exit //p" "$work/sc.out")" 0
  # scontrol (run inside the job) only mentions the resize scripts it writes.
  grep -v -e '^To reset Slurm environment variables, execute$' -e '_resize\.c\?sh$' "$work/scontrol-$n.out" &&
    fail "scontrol update $n printed the above"
done
expect_eq "2 units after NumNodes=2" "$(sed -n 's/^units-2-exit //p' "$work/sc.out")" 0
expect_eq "1 unit after NodeList=" "$(sed -n 's/^units-1-exit //p' "$work/sc.out")" 0
expect_eq "omni-launch exit" "$(sed -n 's/^launch-exit //p' "$work/sc.out")" 0
expect_eq "job $job state" "$(job_state "$job")" COMPLETED

# Another user's request: refused by slurmctld, no record, nothing released.
[ "$(sed -n 's/^scontrol-nobody-exit //p' "$work/sc.out")" != 0 ] || fail "nobody shrank root's job"
grep -qi "access\|denied\|permission\|not authorized\|Invalid user" "$work/scontrol-nobody.out" ||
  fail "scontrol as nobody: $(cat "$work/scontrol-nobody.out")"
grep -q 'omni-release=' "$work/job-nobody.txt" && fail "another user's request left a record"
grep -q '^   NodeList=n\[1-4\]$' "$work/job-nobody.txt" || fail "after nobody's request: $(grep NodeList "$work/job-nobody.txt")"

# Deferred: still 4 nodes, the record naming the two Slurm would have taken.
grep -q '^   NodeList=n\[1-4\]$' "$work/job-deferred.txt" || fail "the job lost its nodes before its units left: $(grep NodeList "$work/job-deferred.txt")"
grep -Eq '^   SystemComment=(.* )?omni-release=n\[3-4\]@[0-9]+ ?' "$work/job-deferred.txt" ||
  fail "no omni-release record for n[3-4]: $(grep -i comment "$work/job-deferred.txt")"
grep -q "job_submit/omni: JobId=$job: shrink by uid 0 deferred: omni-launch drains the units on n\[3-4\]" \
  "$CLUSTER_DIR/log/slurmctld.log" || fail "slurmctld's log does not show the deferred shrink"
# Released: exactly those nodes, the record gone, the nodes idle.
grep -q '^   NodeList=n\[1-2\]$' "$work/job-released.txt" || fail "after the drain: $(grep NodeList "$work/job-released.txt")"
grep -q 'omni-release=' "$work/job-released.txt" && fail "the record outlived the release"
grep -qx n3 "$work/idle.txt" && grep -qx n4 "$work/idle.txt" || fail "n3 and n4 are not idle: $(cat "$work/idle.txt")"
grep -q '^   NodeList=n1$' "$work/job-one.txt" || fail "after NodeList=n1: $(grep NodeList "$work/job-one.txt")"
grep -q 'rewound' "$work/sc.out" && fail "the survivors rewound: the shrink was not graceful"

/usr/bin/python3 - "$work/sc-events.jsonl" "$work/status-2.json" "$work/status-1.json" <<'PY' || fail "events and status (above)"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
got = [(e["reason"], e["old_world"], e["new_world"]) for e in ev]
assert got == [("initial", 0, 4), ("planned", 4, 2), ("planned", 2, 1), ("stop", 1, 0)], got
assert 14 <= ev[1]["step"] < 30 and 30 <= ev[2]["step"] < 60, [e["step"] for e in ev]
assert [e.get("kind") for e in ev] == [None, "scontrol", "scontrol", None], ev
for path, units in ((sys.argv[2], (4, 2)), (sys.argv[3], (2, 1))):
    r = json.load(open(path))["last_resize"]
    assert r["kind"] == "scontrol" and (r["old_units"], r["new_units"]) == units, r
print("ok: events", got, "resizes of kind scontrol")
PY
same_training sc 60 480 15
note "ok: scontrol NumNodes=2 and NodeList= shrank the job gracefully (4 -> 2 -> 1), bitwise the static run"
