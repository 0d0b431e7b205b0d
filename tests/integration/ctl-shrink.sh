#!/usr/bin/env bash
# omni-ctl shrink on the local cluster (four hosts): omni-train-demo under omni-launch with
# 4 units of 1 rank on 4 nodes, shrunk to 2 units at step 10 by `omni-ctl shrink --units 2`,
# which gives the two emptied nodes back to Slurm while the job trains on. Then 2 -> 1 -> 2
# inside the smaller allocation: the joining step omni-launch starts must get the job as it
# now is (no resize script is sourced). Against a static run of 4 units:
#  - per-step loss, LR and samples bitwise the same, no step trained twice (no rewind), every
#    sample of each epoch once;
#  - after the shrink, scontrol shows the job on 2 nodes, the released nodes are idle in
#    sinfo and another job runs on one of them while the omni job still trains; the unit
#    that joins later sees the job's 2 nodes in its SLURM_JOB_NODELIST/SLURM_JOB_NUM_NODES;
#  - bad requests (not a shrink, below what GA allows, the batch host, a node not in the job)
#    are refused with a clear message and exit 1, and the job goes on undisturbed.
. "$(dirname "$0")/lib.sh"
train_commands
cluster_acquire 4 0 netns
cd "$work"
# 15 steps per epoch (960 / 64), 4 epochs; B = 64 with b = 4 allows d = 1, 2, 4 (GA = 16 / d),
# so 3 units are refused.
schedule="--steps 60 --dataset-size 960 --lr 0.05 --warmup 5"
train="$schedule --global-batch 64 --micro-batch 4"

write_static_job static.sh 4 "$train"
elastic_job shrink.sh shrink "--units 4 --boundary-timeout 30" \
  "$train --pace-ms 150 --sample-log $work/samples" <<EOS
at_step 8 || exit 11
bad same shrink --units 4
bad ga shrink --units 3
bad batchhost shrink --nodes "\$SLURMD_NODENAME"
bad notinjob shrink --nodes n9
bad zero shrink --units 0
"$ctl" shrink --units 2 >"$work/shrink-ctl.out" 2>&1
echo "shrink-exit \$?"
scontrol show job "\$SLURM_JOB_ID" | sed -n 's/^ *NodeList=\(.*\)/\1/p' >"$work/nodelist.txt"
sinfo -h -N -o '%N %t' >"$work/sinfo.txt"
# Another job on a released node, now, while this one trains (in the background: the
# training goes on meanwhile).
node=\$(sed -n 's/^released \([^,:]*\).*/\1/p' "$work/shrink-ctl.out")
( timeout 60 sbatch --wait -N1 -w "\$node" -o /dev/null --wrap true; echo "probe-exit \$? on \$node" ) &
probe=\$!
# 2 -> 1, and once that applied, 1 -> 2 (a grow asked for before would replace the shrink).
# Early enough that the joining step, started under load, is in well before step 60.
at_step 20 && "$ctl" reshape --units 1 && units_are 1 || exit 12
"$ctl" reshape --units 2 || exit 13
# The joining rank (unit 4, started after the shrink): the job as its task sees it.
for _ in \$(seq 200); do
  for p in \$("$rank_pids" 4); do
    tr '\\0' '\\n' </proc/\$p/environ | grep -E '^SLURM_(JOB_NODELIST|JOB_NUM_NODES)=' >"$work/joiner-env.txt" && break 2
  done
  sleep 0.05
done
wait \$probe
EOS
mkdir -p "$work/samples"
out=$(timeout 240 sbatch --wait -N4 -t 5 -o "$work/static.out" --parsable static.sh) ||
  { cat "$work/static.out" >&2; fail "the static job failed"; }
out=$(timeout 300 sbatch --wait -N4 -t 5 --omni-elastic=1:4 -o "$work/shrink.out" --parsable shrink.sh) ||
  { cat "$work/shrink.out" "$work"/*.out >&2; fail "the shrinking job failed"; }
# Shown for the log only; '|| true': a job that printed none of these lines fails the checks below.
grep -E '^(bad|shrink-exit|probe-exit|launch-exit)|world [0-9]+ -> [0-9]+|now has' "$work/shrink.out" || true
cat "$work/shrink-ctl.out"

# The refusals: exit 1, a message saying why, and the job went on (checked below: 60 steps).
for c in same ga batchhost notinjob; do
  expect_eq "omni-ctl shrink ($c) exit" "$(sed -n "s/^bad $c //p" "$work/shrink.out")" 1
done
expect_eq "omni-ctl shrink --units 0 exit" "$(sed -n 's/^bad zero //p' "$work/shrink.out")" 2
grep -q "is not below the job's 4 units" "$work/bad-same.out" || fail "shrink to 4: $(cat "$work/bad-same.out")"
grep -q "unit counts that work: 1, 2, 4" "$work/bad-ga.out" || fail "shrink to 3: $(cat "$work/bad-ga.out")"
grep -q "is the job's batch host" "$work/bad-batchhost.out" || fail "shrink of the batch host: $(cat "$work/bad-batchhost.out")"
grep -q "node 'n9' is not one of the job's nodes" "$work/bad-notinjob.out" || fail "shrink of n9: $(cat "$work/bad-notinjob.out")"
grep -q -- "--units: '0'" "$work/bad-zero.out" || fail "shrink to 0: $(cat "$work/bad-zero.out")"

# The shrink: two nodes other than the batch host went back to Slurm, idle for other jobs.
expect_eq "omni-ctl shrink --units 2 exit" "$(sed -n 's/^shrink-exit //p' "$work/shrink.out")" 0
released=$(sed -n 's/^released \([^:]*\):.*/\1/p' "$work/shrink-ctl.out")
[ -n "$released" ] || fail "omni-ctl did not say which nodes it released"
expect_eq "nodes released" "$(tr ',' '\n' <<<"$released" | wc -l)" 2
nodelist=$(cat "$work/nodelist.txt")
for n in ${released//,/ }; do
  grep -qx "$n idle" "$work/sinfo.txt" || fail "released node $n is not idle: $(cat "$work/sinfo.txt")"
done
expect_eq "nodes in the job after the shrink" "$(scontrol show hostnames "$nodelist" | wc -l)" 2
# The unit that joined after the shrink runs in the job as it now is, not as it started (its
# srun step got the job's current nodes; omni-launch sources no resize script).
expect_eq "the joining rank's SLURM_JOB_NUM_NODES" "$(sed -n 's/^SLURM_JOB_NUM_NODES=//p' "$work/joiner-env.txt")" 2
joiner_list=$(sed -n 's/^SLURM_JOB_NODELIST=//p' "$work/joiner-env.txt")
[ -n "$joiner_list" ] || fail "no SLURM_JOB_NODELIST in the joining rank's environment"
expect_eq "the joining rank's SLURM_JOB_NODELIST" "$(scontrol show hostnames "$joiner_list" | xargs)" \
  "$(scontrol show hostnames "$nodelist" | xargs)"
expect_eq "a job on released node" "$(sed -n 's/^probe-exit \([0-9]*\).*/\1/p' "$work/shrink.out")" 0
expect_eq "omni-launch exit" "$(sed -n 's/^launch-exit //p' "$work/shrink.out")" 0

# Every step once, in order (a rewind would retrain steps), bitwise the static run's.
/usr/bin/python3 "$top_src/tests/integration/same-steps.py" "$work/static.jsonl" "$work/shrink.jsonl" 60 ||
  fail "static and shrinking runs differ (above)"
planned_worlds shrink 4 2 1 2
/usr/bin/python3 "$top_src/tests/integration/exactly-once.py" "$work/samples" 960 15 60 ||
  fail "the shrinking run's samples (above)"
note "ok: omni-ctl shrink 4 -> 2 released $released while training; then 2 -> 1 -> 2; bitwise equal to the static run"
