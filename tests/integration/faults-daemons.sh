#!/usr/bin/env bash
# Slurm's daemons failing under a training job (#46), on a 3-host cluster (omni-cluster
# --hosts netns): omni-train-demo under omni-launch, 3 units of one rank, while
#  1. the slurmd of a node that runs a unit is killed (SIGKILL) and, 3 s later, started
#     again (omni-cluster kill/start: exactly that daemon, by its pid file);
#  2. slurmctld is stopped (SIGTERM, as a restart does) just after a plain
#     `scontrol update JobId=J NumNodes=2` (job_submit/omni defers it to omni-launch, which
#     drains a unit at a boundary and then gives its node back), and 3 s later started
#     again from its saved state: the shrink is carried out across the restart (without
#     job_submit/omni, as on 26.05 without a source tree, `omni-ctl shrink` before the
#     outage instead, so that part 3 runs there too). Not SIGKILL: a slurmctld that crashes loses what it had not saved
#     yet, which is Slurm's matter (seen: a job allocated 2.7 s before the crash came back
#     PENDING, its running steps were killed when the nodes registered, the job was requeued
#     and its batch host drained, "Duplicate jobid");
#  3. slurmctld is stopped for 11 s while an `omni-ctl grow --units 3` waits in a
#     satellite job (omni-sat-J, --exclusive) that Slurm cannot run yet: a job of 100 s holds
#     the one node the shrink gave back. Started again, slurmctld still has the satellite
#     pending; the holder is cancelled, the satellite runs and its unit joins at a boundary
#     (2 -> 3). 11 s is longer than omni-launch's 10 s bound on each squeue, so its once-a-
#     second look at the satellite fails meanwhile: a failed look is logged and tried again,
#     never taken for "the satellite is gone". Taken so, omni-launch gives the units up and
#     withdraws the grow while the satellite still waits (tried: an empty list for a failed
#     look in poll_satellites: "satellite job 4 ended before its units joined; the grow to 3
#     units is withdrawn", the satellite then ran its unit for nobody until the job's end,
#     and the test failed with "the training ended before the grow").
# Neither daemon is in the training's path: the ranks talk to the coordinator in omni-launch
# and to each other, the unit steps' slurmstepd live on without slurmd, and omni-launch's
# looks at Slurm (scontrol/squeue, in the background) that fail meanwhile are logged and
# tried again, never taken for an answer. Checked: training never paused for a lost rank
# (events: initial, the planned 3 -> 2 of the shrink and 2 -> 3 of the grow, the final
# stop), every step's loss, LR and samples bitwise the static run's and none trained twice,
# every sample once per epoch; the steps went on while each daemon was down; afterwards
# slurmd answers for its node again, slurmctld still knows the job and its unit steps, the
# shrink gave one node back, the satellite ended with the job, and the job ends COMPLETED
# with status 0.
# What it guards is a property of the design rather than one switch: nothing on the
# training path (ranks, coordinator, omni-launch's loop) waits on slurmd or slurmctld. Were
# anything to (a rank or the supervisor acting on a failed Slurm call, a unit step that ended
# with its node's slurmd), the job would show it as a pause or a loss: a "lost" event, steps
# trained twice, or no step while a daemon is down, each failing a check below. Not tried:
# slurm-omni has no such dependency to put in and take out again. Seen while writing it:
# inside the job a Slurm command waits for slurmctld to come back (scontrol show job: 8 s
# for an 8 s outage) rather than failing, so omni-launch's background looks simply wait.
. "$(dirname "$0")/lib.sh"
train_commands
cluster_acquire 3 0 netns
cd "$work"
# A daemon this test killed is started again at exit, whatever happened (a shared cluster
# must outlive the test; an own one is stopped right after).
down_daemon=
holder=
# At exit, a daemon the test stopped is started again; '|| true': cluster_release stops it anyway.
revive() { [ -z "$down_daemon" ] || "$omni_cluster" --dir "$CLUSTER_DIR" start "$down_daemon" >/dev/null 2>&1 || true; }
# The holder of part 3 is bounded by -t 2; cancelled at once, '|| true': it may have ended.
# So is the training's sbatch --wait, which would otherwise outlive a failed test.
sbatch_pid=
trap 'revive; { [ -z "$holder" ] || scancel "$holder" 2>/dev/null || true; }
  { [ -z "$sbatch_pid" ] || kill "$sbatch_pid" 2>/dev/null || true; }; cluster_release; cleanup_work' EXIT
cname=$(scontrol show config | sed -n 's/^ClusterName *= *//p')
[ -n "$cname" ] || fail "cannot read the cluster's name"
# 15 steps per epoch (720 / 48), 16 epochs.
total=240
train="--steps $total --dataset-size 720 --lr 0.05 --warmup 5 --global-batch 48 --micro-batch 4"
write_static_job static.sh 3 "$train"
timeout 120 sbatch --wait -N3 --ntasks-per-node=1 -t 5 -o "$work/static.out" static.sh >/dev/null ||
  { cat "$work/static.out" >&2; fail "the static job failed"; }

step_now() { tail -n 1 "$work/train.jsonl" 2>/dev/null | sed -n 's/^{"step": \([0-9]*\),.*/\1/p'; }
# advances WHAT: the training reaches a later step within 5 s.
advances() {
  local s0 s
  s0=$(step_now)
  for _ in $(seq 100); do
    s=$(step_now)
    [ "${s:-0}" -gt "${s0:-0}" ] && return 0
    sleep 0.05
  done
  fail "no step trained while $1 (step ${s0:-none})"
}

# slurmctld_outage SECONDS WHAT: slurmctld stopped (SIGTERM, as a restart does) for SECONDS,
# the training going on meanwhile, then started again from its saved state.
slurmctld_outage() {
  down_daemon=slurmctld
  "$omni_cluster" --dir "$CLUSTER_DIR" kill slurmctld --signal TERM >/dev/null || fail "cannot stop slurmctld"
  note "stopped slurmctld$2 at step $(step_now)"
  advances "slurmctld was down"
  sleep "$1"
  advances "slurmctld was down"
  scontrol ping >/dev/null 2>&1 && fail "slurmctld answers (the outage is not one)"
  "$omni_cluster" --dir "$CLUSTER_DIR" start slurmctld >/dev/null || fail "cannot start slurmctld again"
  down_daemon=
  note "started slurmctld again at step $(step_now)"
}

start_training train 3 "--units 3 --boundary-timeout 6 --satellite-args=--exclusive" \
  "$train --pace-ms 200 --ckpt $work/ckpt --ckpt-every 10"
"$at_step" "$work/train.jsonl" 5 60 || fail "the job never reached step 5: $(tail -5 train.out)"

# 1. slurmd of a node with a unit (not the batch host's).
victim=$(SLURM_JOB_ID=$job SLURM_CLUSTER_NAME=$cname "$rank_pids" 2 | head -n 1)
[ -n "$victim" ] || fail "no rank of unit 2"
node=$(tr '\0' '\n' <"/proc/$victim/environ" | sed -n 's/^SLURMD_NODENAME=//p')
[ "$node" = n1 ] && node=n2
down_daemon=slurmd-$node
"$omni_cluster" --dir "$CLUSTER_DIR" kill "slurmd-$node" >/dev/null || fail "cannot kill slurmd on $node"
note "killed slurmd on $node at step $(step_now)"
advances "slurmd on $node was down"
sleep 3
advances "slurmd on $node was down"
"$omni_cluster" --dir "$CLUSTER_DIR" start "slurmd-$node" >/dev/null || fail "cannot start slurmd on $node again"
down_daemon=
note "started slurmd on $node again at step $(step_now)"
# It answers for its node again (no '*', not DOWN) and for its steps.
for _ in $(seq 100); do
  st=$(sinfo -h -n "$node" -o %t | head -n 1)
  case "$st" in *'*'*|down*|drain*|fail*|'') sleep 0.1 ;; *) break ;; esac
done
case "$st" in alloc|mix) ;; *) fail "node $node is '$st' after slurmd came back" ;; esac
srun --jobid="$job" --overlap -N1 -w "$node" true || fail "no step runs on $node after slurmd came back"

# 2. slurmctld, with a plain scontrol shrink under way. Where job_submit/omni is not built
# (Debian unstable's 26.05.5, no source tree of that release) a plain NumNodes= update is not
# graceful: omni-ctl shrinks before the outage instead, so that part 3 still runs there.
job_dir=/tmp/omni-$(id -u)/job-$cname-$job
if [ -f "$top_build/job_submit/.libs/job_submit_omni.so" ]; then
  plain_shrink=1
  grep -qx "JobSubmitPlugins=omni" "$CLUSTER_DIR/etc/slurm.conf" || fail "the cluster does not load job_submit/omni"
  scontrol update JobId="$job" NumNodes=2 || fail "scontrol update NumNodes=2 failed"
else
  plain_shrink=0
  note "job_submit/omni is not built (configure: $(sed -n 's|^  job_submit/omni built *||p' "$top_build/config.log" 2>/dev/null | tail -n 1)): omni-ctl shrinks before slurmctld's outage, not a plain scontrol update across it"
  "$ctl" --job-dir "$job_dir" shrink --units 2 --job-id "$job" --wait 120 >shrink-ctl.out 2>&1 ||
    fail "omni-ctl shrink: $(cat shrink-ctl.out)"
fi
slurmctld_outage 3 ""
expect_eq "job $job after slurmctld's restart" "$(squeue -h -j "$job" -o %T)" RUNNING
# '|| true': grep -c exits 1 when it counts 0, a count the check below fails.
steps=$(squeue -h -s -j "$job" -o %j | grep -c '^omni-u' || true)
[ "$steps" -ge 2 ] || fail "$steps unit steps after slurmctld's restart"
advances "slurmctld was back"
[ "$(step_now)" -lt $total ] || fail "the training ended before slurmctld was back (the test checks nothing then)"

# 3. slurmctld, with a satellite grow pending. Once the shrink has applied (3 -> 2 in the
# events), a holder takes the node it gives back (the one idle node, when Slurm has it).
for _ in $(seq 200); do grep -q '"old_world":3,.*"reason":"planned"' train-events.jsonl && break; sleep 0.05; done
if ! grep -q '"old_world":3,.*"reason":"planned"' train-events.jsonl; then
  # What omni-launch and slurmctld did about the deferred shrink, for the log: whether the
  # record was made, slurmctld's stop came before its SIGURG reached omni-launch, or the
  # look at the job failed (seen twice in 24.11.5's whole suite under scripts/test; not in
  # three runs alone). '|| true': a missing line is what this shows.
  { echo "---- omni-launch:"; grep -E 'shrink|warning|error' train.out | tail -n 20
    echo "---- slurmctld:"; grep -E "job_submit/omni|SIGTERM|started on cluster|JobId=$job " \
      "$CLUSTER_DIR/log/slurmctld.log" | tail -n 20; } >&2 || true
  fail "the shrink never applied"
fi
holder=$(sbatch --parsable -N1 --exclusive -t 2 -o /dev/null --wrap 'sleep 100') || fail "cannot submit the holder"
for _ in $(seq 300); do [ "$(squeue -h -j "$holder" -o %T)" = RUNNING ] && break; sleep 0.1; done
expect_eq "holder $holder" "$(squeue -h -j "$holder" -o %T)" RUNNING
note "holder $holder runs on $(squeue -h -j "$holder" -o %N), the job on $(squeue -h -j "$job" -o %N), at step $(step_now)"
# omni-ctl from this host through the job's directory (the test runs as the job's user): its
# --job J would run a step of the job, which Slurm refuses here for the memory the units hold.
"$ctl" --job-dir "$job_dir" grow --units 3 --wait 0 >grow-ctl.out 2>&1 ||
  fail "omni-ctl grow: $(cat grow-ctl.out)"
sat_state() { squeue -h --name "omni-sat-$job" -o %T; }
for _ in $(seq 100); do [ "$(sat_state)" = PENDING ] && break; sleep 0.1; done
expect_eq "the satellite of job $job before the restart" "$(sat_state)" PENDING
sat=$(squeue -h --name "omni-sat-$job" -o %i)
slurmctld_outage 11 " with satellite $sat pending"
expect_eq "the satellite of job $job after the restart" "$(sat_state)" PENDING
t0=$(date +%s%N)
scancel "$holder"
for _ in $(seq 200); do [ "$(sat_state)" = RUNNING ] && break; sleep 0.05; done
sat_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
expect_eq "the satellite of job $job after the holder" "$(sat_state)" RUNNING
for _ in $(seq 400); do grep -q '"old_world":2,.*"reason":"planned"' train-events.jsonl && break; sleep 0.05; done
grow_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
note "satellite running $sat_ms ms, grow 2 -> 3 applied $grow_ms ms after the holder was cancelled (step $(step_now))"
[ "$(step_now)" -lt $total ] || fail "the training ended before the grow (the test checks nothing then)"

wait $sbatch_pid || { cat train.out >&2; fail "the job failed"; }
sbatch_pid=
# Shown for the log only; '|| true': no warning at all is the expected case.
grep -E 'warning|launch-exit' train.out | sort | uniq -c | head -20 || true
expect_eq "omni-launch exit" "$(sed -n 's/^launch-exit //p' train.out)" 0
expect_eq "job $job state" "$(job_state "$job")" COMPLETED
/usr/bin/python3 - train-events.jsonl <<'PY' || fail "events: $(cat train-events.jsonl)"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
got = [(e["reason"], e["old_world"], e["new_world"]) for e in ev]
assert got == [("initial", 0, 3), ("planned", 3, 2), ("planned", 2, 3), ("stop", 3, 0)], got
print("ok: events", got)
PY
same_training train $total 720 15
[ $plain_shrink = 0 ] || grep -q "the shrink Slurm asked for (scontrol update of nodes n[0-9]" train.out ||
  fail "omni-launch did not carry out the scontrol shrink"
expect_eq "job $job's nodes at its end" "$(sacct -n -X -P -j "$job" -o NNodes | tail -n 1)" 2
expect_eq "omni-sat-$job jobs after the job" "$(squeue -h --name "omni-sat-$job" -o %i | wc -l)" 0
note "ok: slurmd on $node killed and slurmctld stopped, both started again during training, slurmctld again with a grow pending (applied $grow_ms ms after its node was free): nothing lost, bitwise the static run"
