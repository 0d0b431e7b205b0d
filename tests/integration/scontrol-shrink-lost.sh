#!/usr/bin/env bash
# A plain `scontrol update JobId=J NumNodes=2` on a running omni job of 4 units (one rank on
# each of 4 nodes), on a local cluster (four hosts) of its own WITHOUT job_submit/omni (what a
# site that does not enable it gets; scontrol-shrink.sh tests the graceful path with it).
# Slurm takes the last two nodes from the job and kills the job's steps there at once, with
# no warning a rank could act on: for the job this is the lost-rank path (omni-launch(1),
# slurm-omni(7)). Checked:
#  - training goes on with 2 units on the nodes the job kept: the survivors rewind to the
#    last checkpoint (step 10) and recompute the steps after it, as documented for that path;
#  - per-step loss, LR and samples bitwise those of a static run that never changed size, and
#    every sample of each epoch once (the lines of a step's first, lost run do not count);
#  - the events: the initial 4 units, then a "lost" 4 -> 2 at the step Slurm struck; the job
#    ends COMPLETED with status 0, and the released nodes are idle in sinfo meanwhile;
#  - omni-ctl status reports the resize as of kind "lost".
. "$(dirname "$0")/lib.sh"
train_commands
cluster_acquire 4 0 netns --no-job-submit
cd "$work"
# 15 steps per epoch (480 / 32), 4 epochs; d = 4 and 2 both keep GA whole.
train="--steps 60 --dataset-size 480 --lr 0.05 --warmup 5 --global-batch 32 --micro-batch 4"

write_static_job static.sh 4 "$train"
mkdir -p "$work/samples"
elastic_job sc.sh sc "--units 4" \
  "$train --pace-ms 150 --ckpt $work/ckpt --ckpt-every 10 --sample-log $work/samples" <<EOS
at_step 14 || exit 11
scontrol update JobId=\$SLURM_JOB_ID NumNodes=2 >"$work/scontrol.out" 2>&1
echo "scontrol-exit \$?"
units_are 2; echo "units-exit \$?"
# The released nodes, as Slurm sees them now.
scontrol show job \$SLURM_JOB_ID | grep -o ' NodeList=[^ ]*' | head -n1 >"$work/kept.txt"
sinfo -h -N -p omni -t idle -o %N | sort -u >"$work/idle.txt"
"$ctl" status --json >"$work/status-after.json"
EOS
out=$(timeout 240 sbatch --wait -N4 -t 5 -o "$work/static.out" --parsable static.sh) ||
  { cat "$work/static.out" >&2; fail "the static job failed"; }
# -n4, not --ntasks-per-node=1: from Slurm 23.11 slurmctld derives a running job's task count
# from NumNodes= x its ntasks-per-node and refuses the change ("Job is no longer pending
# execution"; doc/design.md), so a plain NumNodes= shrink of such a job never happens there.
job=$(timeout 300 sbatch --wait -N4 -n4 --exclusive -t 5 --omni-elastic=1:4 -o "$work/sc.out" --parsable sc.sh) ||
  { cat "$work/sc.out" >&2; fail "the job shrunk by scontrol failed"; }
job=${job%%;*}
# Shown for the log only; '|| true': a job that printed none of these lines fails the checks below.
grep -E '^(scontrol-exit|units-exit|launch-exit)|lost|rewound|world [0-9]+ -> [0-9]+' "$work/sc.out" || true

expect_eq "scontrol update exit" "$(sed -n 's/^scontrol-exit //p' "$work/sc.out")" 0
expect_eq "2 units after the shrink" "$(sed -n 's/^units-exit //p' "$work/sc.out")" 0
expect_eq "omni-launch exit" "$(sed -n 's/^launch-exit //p' "$work/sc.out")" 0
expect_eq "job $job state" "$(job_state "$job")" COMPLETED
kept=$(sed 's/^ NodeList=//' "$work/kept.txt")
expect_eq "nodes the job kept" "$(scontrol show hostnames "$kept" | wc -l)" 2
for n in $(scontrol show hostnames "$kept"); do
  grep -qx "$n" "$work/idle.txt" && fail "node $n is still the job's, yet idle"
done
expect_eq "idle nodes after the shrink" "$(wc -l <"$work/idle.txt")" 2
grep -q "ranks lost; rewound to step 10 with world 2" "$work/sc.out" || fail "the survivors did not rewind to step 10"

/usr/bin/python3 - "$work/sc-events.jsonl" "$work/status-after.json" <<'PY' || fail "events and status (above)"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
got = [(e["reason"], e["old_world"], e["new_world"]) for e in ev]
assert got == [("initial", 0, 4), ("lost", 4, 2), ("stop", 2, 0)], got
assert 14 <= ev[1]["step"] <= 20, ev[1]
assert ev[1]["kind"] == "lost", ev[1]
r = json.load(open(sys.argv[2]))["last_resize"]
assert r["kind"] == "lost" and (r["old_units"], r["new_units"]) == (4, 2), r
print("ok: events", got, "last resize", r["kind"])
PY
same_training sc 60 480 15 redone-ok
note "ok: scontrol NumNodes=2 on a 4-unit job: lost-rank path, rewound to step 10, bitwise the static run"
