#!/usr/bin/env bash
# omni-ctl grow by Slurm's own job expansion on the local cluster (four hosts, select/omni,
# SchedulerParameters=permit_job_expansion, no GRES, plugstack.conf grow=expand):
# omni-train-demo under omni-launch with 2 units of 1 rank on 2 exclusive nodes.
#  - A grow --via satellite is withdrawn: the site allows expansion only.
#  - While a blocker job holds the two other nodes, `omni-ctl grow --units 4 --via expand`
#    stays pending (its helper job omni-exp-J waits), says so, and `omni-ctl grow --cancel`
#    withdraws it: the helper is gone and the job keeps its 2 nodes.
#  - With the nodes idle, `omni-ctl grow --units 4` (via auto, which is expand here) has Slurm add the two nodes to the job itself: `scontrol show job` lists 4 nodes
#    with cores on every one (select/omni's repair of Slurm's merge), the new units' steps run
#    on the added nodes, and they join at a boundary.
#  - Against a static run of 4 units: per-step loss, LR and samples bitwise the same, no step
#    trained twice, every sample of each epoch once; worlds 2 -> 4, events initial 2 and
#    planned 2 -> 4.
#  - No omni-exp job outlives the grow or the job; scancel of a job whose expansion waits
#    cancels its helper.
. "$(dirname "$0")/lib.sh"
train_commands
# Slurm's merge of the helper into the job gives the added nodes no cores without select/omni's
# repair (doc/design.md, "Job expansion"): no way around it without select/omni. Where it is
# not built (Slurm 23.02-24.05 and 25.05 on: another select API) omni-launch refuses an
# expansion, says why, and grows by satellite instead; that refusal is what runs here then.
if [ ! -f "$top_build/select_plugin/.libs/select_omni.so" ]; then
  note "select/omni is not built (configure: $(sed -n 's|^  select/omni built *||p' "$top_build/config.log" 2>/dev/null | tail -n 1)): checking omni-launch's refusal of an expansion instead"
  cluster_acquire 3 0 netns
  cd "$work"
  grep -q '^SchedulerParameters=.*permit_job_expansion' "$CLUSTER_DIR/etc/slurm.conf" ||
    fail "the cluster does not permit job expansion: the refusal checked would be another one"
  elastic_job refuse.sh refuse "--units 2 --boundary-timeout 30" \
    "--steps 60 --dataset-size 480 --global-batch 24 --micro-batch 2 --pace-ms 150" <<EOS
at_step 3 || exit 11
bad expand grow --units 3 --via expand --wait 10
"$ctl" grow --units 3 --wait 120 >"$work/auto-ctl.out" 2>&1
echo "auto-exit \$?"
EOS
  job=$(timeout 300 sbatch --wait -N2 --exclusive --ntasks-per-node=1 -t 5 --omni-elastic=1:4 -o "$work/refuse.out" --parsable refuse.sh) ||
    { cat "$work/refuse.out" >&2; fail "the job failed"; }
  job=${job%%;*}
  expect_eq "omni-ctl grow --via expand exit" "$(sed -n 's/^bad expand //p' "$work/refuse.out")" 1
  grep -q "the grow to 3 units was withdrawn" "$work/bad-expand.out" ||
    fail "omni-ctl did not report the withdrawal: $(cat "$work/bad-expand.out")"
  grep -q "cannot grow via expand: SelectType is select/cons_tres: Slurm's cons_tres merge leaves the nodes an expansion adds without cores" \
    "$work/refuse.out" || fail "no refusal naming cons_tres's merge: $(grep -i 'grow' "$work/refuse.out")"
  expect_eq "omni-ctl grow (via auto) exit" "$(sed -n 's/^auto-exit //p' "$work/refuse.out")" 0
  grep -q "growing by satellite, not by expansion: SelectType is select/cons_tres" "$work/refuse.out" ||
    fail "omni-launch did not say why it grew by satellite: $(grep -i 'grow' "$work/refuse.out")"
  expect_eq "expansion helpers of job $job" "$(sacct -n -X --name "omni-exp-$job" -o JobID | wc -l)" 0
  expect_eq "satellites of job $job" "$(sacct -n -X --name "omni-sat-$job" -o JobID | wc -l)" 1
  /usr/bin/python3 - "$work/refuse-events.jsonl" <<'PY' || fail "events: $(cat "$work/refuse-events.jsonl")"
import json, sys
got = [(e["reason"], e["old_world"], e["new_world"]) for e in map(json.loads, open(sys.argv[1]))]
assert got == [("initial", 0, 2), ("planned", 2, 3), ("stop", 3, 0)], got
print("ok: events", got)
PY
  expect_eq "job $job state" "$(job_state "$job")" COMPLETED
  note "ok: without select/omni an expansion is refused naming cons_tres's merge, and the grow goes by satellite"
  exit 0
fi
cluster_acquire 4 0 netns --select omni --spank-args grow=expand
cd "$work"
schedule="--steps 90 --dataset-size 960 --lr 0.05 --warmup 5"
train="$schedule --global-batch 64 --micro-batch 4"

write_static_job static.sh 4 "$train"
elastic_job grow.sh grow "--units 2 --boundary-timeout 30" \
  "$train --pace-ms 150 --sample-log $work/samples" <<EOS
at_step 3 || exit 11
bad site grow --units 4 --via satellite --wait 30
# The other two nodes are busy: the expansion's helper waits for them.
blocker=\$(sbatch --parsable -p omni -x "\$(scontrol show job \$SLURM_JOB_ID | sed -n 's/^ *NodeList=//p')" -N2 --exclusive -t 2 -o /dev/null --wrap 'sleep 100')
echo "blocker \$blocker"
for _ in \$(seq 100); do [ "\$(squeue -h -j \$blocker -o %T)" = RUNNING ] && break; sleep 0.1; done
"$ctl" grow --units 4 --via expand --wait 3 >"$work/pending-ctl.out" 2>&1
echo "pending-exit \$?"
squeue --me -h --name "omni-exp-\$SLURM_JOB_ID" -o '%i %T' >"$work/pending-before.txt"
"$ctl" grow --cancel >"$work/cancel-ctl.out" 2>&1
echo "cancel-exit \$?"
for _ in \$(seq 100); do
  [ -z "\$(squeue --me -h --name "omni-exp-\$SLURM_JOB_ID" -o '%i')" ] && break
  sleep 0.1
done
squeue --me -h --name "omni-exp-\$SLURM_JOB_ID" -o '%i' >"$work/pending-after.txt"
scancel "\$blocker"
for _ in \$(seq 100); do [ -z "\$(squeue -h -j \$blocker -o %T)" ] && break; sleep 0.1; done
at_step 12 || exit 12
"$ctl" grow --units 4 --wait 120 >"$work/grow-ctl.out" 2>&1
echo "grow-exit \$?"
scontrol show job -d \$SLURM_JOB_ID >"$work/job-after.txt"
squeue --me -h -j \$SLURM_JOB_ID -s -o '%i %j %N' >"$work/steps-after.txt"
# More nodes than the cluster has: Slurm refuses the helper, and the grow is withdrawn.
bad huge grow --units 8 --via expand --wait 30
"$ctl" status --json >"$work/status-after.json"
EOS
mkdir -p "$work/samples"
timeout 240 sbatch --wait -N4 -t 5 -o "$work/static.out" --parsable static.sh >/dev/null ||
  { cat "$work/static.out" >&2; fail "the static job failed"; }
job=$(timeout 300 sbatch --wait -N2 --exclusive --ntasks-per-node=1 -t 5 --omni-elastic=1:8 -o "$work/grow.out" --parsable grow.sh) ||
  { cat "$work/grow.out" >&2; fail "the growing job failed"; }
job=${job%%;*}
blocker=$(sed -n 's/^blocker //p' "$work/grow.out")
[ -z "$blocker" ] || scancel "$blocker"
# Shown for the log only; '|| true': a job that printed none of these lines fails the checks below.
grep -E '^(pending|cancel|grow|launch)-exit|expan|helper|world [0-9]+ -> [0-9]+' "$work/grow.out" || true
cat "$work/pending-ctl.out" "$work/cancel-ctl.out" "$work/grow-ctl.out"

# The site's choice: grow=expand refuses a satellite.
expect_eq "omni-ctl grow --via satellite (site grow=expand) exit" "$(sed -n 's/^bad site //p' "$work/grow.out")" 1
grep -q "cannot grow via satellite: this cluster grows jobs by expand only (plugstack.conf grow=expand)" "$work/grow.out" ||
  fail "omni-launch did not refuse a satellite under grow=expand"
expect_eq "satellite jobs of job $job" "$(sacct -n -X --name "omni-sat-$job" -o JobID | wc -l)" 0

# The pending expansion: said so, its helper waited, the cancel removed it.
expect_eq "omni-ctl grow --via expand --wait 3 exit" "$(sed -n 's/^pending-exit //p' "$work/grow.out")" 1
grep -q "grow to 4 units did not apply within 3 s; it stays pending" "$work/pending-ctl.out" ||
  fail "the pending grow: $(cat "$work/pending-ctl.out")"
expect_eq "pending helper before the cancel" "$(awk '{ print $2 }' "$work/pending-before.txt")" PENDING
expect_eq "omni-ctl grow --cancel exit" "$(sed -n 's/^cancel-exit //p' "$work/grow.out")" 0
expect_eq "helpers after the cancel" "$(wc -l <"$work/pending-after.txt")" 0
grep -q "no grow is requested any more: cancelling the expansion (helper job" "$work/grow.out" ||
  fail "omni-launch did not cancel the pending helper"

# The grow: Slurm's expansion, 4 nodes in the job, each with cores, units on the added nodes.
expect_eq "omni-ctl grow --units 4 exit" "$(sed -n 's/^grow-exit //p' "$work/grow.out")" 0
grep -q ": 4 units at step" "$work/grow-ctl.out" || fail "omni-ctl grow did not report 4 units: $(cat "$work/grow-ctl.out")"
grep -q "reshape to 4 units requested: starting 2 joining unit(s) on nodes Slurm's job expansion adds" "$work/grow.out" ||
  fail "the grow did not go by expansion (auto)"
grep -qE "helper job [0-9]+ running [0-9]+ ms after the request; its nodes are job $job's" "$work/grow.out" ||
  fail "no merged helper in omni-launch's log"
nodes=$(sed -n 's/^ *NodeList=//p' "$work/job-after.txt")
expect_eq "the job's nodes after the grow" "$(scontrol show hostnames "$nodes" | wc -l)" 4
# Every node of the job holds cores (Slurm's own merge leaves the added ones without).
with_cores=$(sed -n 's/^ *Nodes=\([^ ]*\) CPU_IDs=[0-9].*/\1/p' "$work/job-after.txt" |
  while read -r h; do scontrol show hostnames "$h"; done | sort -u | wc -l)
expect_eq "nodes of the job with cores" "$with_cores" 4
# Units 2 and 3 were the withdrawn expansion's (ids are never reused): 4 and 5 joined.
had=$(awk '$2 == "omni-u0" || $2 == "omni-u1" { print $3 }' "$work/steps-after.txt" | sort -u | xargs)
expect_eq "nodes of the first units" "$(echo "$had" | wc -w)" 2
for u in omni-u4 omni-u5; do
  n=$(awk -v u=$u '$2 == u { print $3 }' "$work/steps-after.txt")
  [ -n "$n" ] || fail "no step $u after the grow: $(cat "$work/steps-after.txt")"
  case " $had " in *" $n "*) fail "step $u runs on $n, a node the job had ($had)" ;; esac
done
expect_eq "omni-ctl grow --units 8 (more nodes than there are) exit" "$(sed -n 's/^bad huge //p' "$work/grow.out")" 1
grep -q "the grow to 8 units was withdrawn" "$work/bad-huge.out" || fail "grow to 8: $(cat "$work/bad-huge.out")"
grep -q "Slurm did not grant the expansion's helper allocation (salloc exit 1: salloc: error: .*node configuration is not available" \
  "$work/grow.out" || fail "omni-launch did not say why the expansion to 8 units failed"
/usr/bin/python3 - "$work/status-after.json" <<'PY' || fail "the status after the refused grow (above)"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["units"] == 4 and s["target_units"] is None, s
print("ok: 4 units, no pending grow after the refused one")
PY
expect_eq "omni-exp-$job jobs after the job" "$(squeue -h --name "omni-exp-$job" -o %i | wc -l)" 0
expect_eq "omni-launch exit" "$(sed -n 's/^launch-exit //p' "$work/grow.out")" 0

/usr/bin/python3 "$top_src/tests/integration/same-steps.py" "$work/static.jsonl" "$work/grow.jsonl" 90 ||
  fail "static and growing runs differ (above)"
planned_worlds grow 2 4
/usr/bin/python3 "$top_src/tests/integration/exactly-once.py" "$work/samples" 960 15 90 ||
  fail "the growing run's samples (above)"

# scancel of a job whose expansion waits (a blocker holds every other node): its helper goes.
blocker=$(sbatch --parsable -p omni -N3 --exclusive -t 3 -o /dev/null --wrap 'sleep 170')
for _ in $(seq 100); do [ "$(squeue -h -j "$blocker" -o %T)" = RUNNING ] && break; sleep 0.1; done
elastic_job cancel.sh cancel "--units 1" \
  "--steps 3000 --dataset-size 960 --lr 0.05 --warmup 5 --global-batch 64 --micro-batch 4 --pace-ms 50" <<EOS
at_step 3 || exit 11
"$ctl" grow --units 2 --via expand --wait 0 >"$work/cancel-grow.out" 2>&1
echo "grow-exit \$?"
for _ in \$(seq 100); do
  h=\$(squeue --me -h --name "omni-exp-\$SLURM_JOB_ID" -t PENDING -o %i)
  [ -n "\$h" ] && break
  sleep 0.1
done
echo "helper-pending \$h"
EOS
cjob=$(sbatch --parsable -N1 --exclusive --ntasks-per-node=1 -t 5 --omni-elastic=1:4 -o "$work/cancel.out" cancel.sh)
cjob=${cjob%%;*}
for _ in $(seq 600); do
  grep -qE '^(helper-pending|launch-exit)' "$work/cancel.out" 2>/dev/null && break
  sleep 0.2
done
helper=$(sed -n 's/^helper-pending //p' "$work/cancel.out")
[ -n "$helper" ] || { cat "$work/cancel.out" >&2; fail "job $cjob's expansion helper was not pending"; }
scancel "$cjob"
for _ in $(seq 300); do
  [ -z "$(squeue -h --name "omni-exp-$cjob" -o %i)$(squeue -h -j "$cjob" -t PD,R,CG -o %i)" ] && break
  sleep 0.1
done
scancel "$blocker"
expect_eq "expansion helpers of job $cjob left after its scancel" "$(squeue -h --name "omni-exp-$cjob" -o %i | wc -l)" 0
# (salloc, in the batch step, gets Slurm's SIGTERM too and may withdraw its request first.)
grep -q "got signal SIGTERM: cancelling the expansion" "$work/cancel.out" ||
  { cat "$work/cancel.out" >&2; fail "omni-launch did not cancel helper $helper at its scancel"; }
note "ok: omni-ctl grow 2 -> 4 by Slurm's job expansion (job $job now on $nodes); pending expansion withdrawn; bitwise equal to the static run; scancel of job $cjob cancelled its pending helper $helper"
