#!/usr/bin/env bash
# Faults of the network and of omni-launch during training (#46), on a 3-host cluster (every
# node its own network namespace, omni-cluster --hosts netns): omni-train-demo under
# omni-launch, 3 units of one rank, checkpoints every 5 steps, boundary timeout T = 6 s.
#  1. A node's link cut (ip link set eth0 down in its namespace) at step 12 (or a little
#     later on a busy machine), restored once the survivors went on. The coordinator hears
#     nothing from the cut-off rank for T and declares it lost; the survivors' collectives
#     are cut, they rewind to the last checkpoint with 2 units and finish. The cut-off rank hears nothing from the coordinator for T either and
#     concludes it is out (libomni's cut-off rule, runtime/liveness.h): it exits 1 while its
#     link is still down, without training or writing a checkpoint alone (no split brain).
#     Checked: loss, LR and samples of every step bitwise the static run's, every sample
#     once per epoch (as sets), one "lost" event 3 -> 2, the cut-off rank gone within
#     T + 3 s of the cut, every checkpoint complete.
#  2. omni-launch (the coordinator's process) killed with SIGKILL at step 17 (or later), the
#     batch script living on: every rank stops by itself within T + 3 s (the same rule: no
#     reply for the liveness timeout), none hangs; the job fails, `scontrol requeue` runs it
#     again, and it resumes from the newest checkpoint bitwise: loss, LR, samples, each
#     sample once per epoch; the job's files that the killed omni-launch left are gone.
# How it fails without the protection (tried, with the cut-off rule in Liveness::run
# removed): the cut-off rank waits in its collective (OMNI_COMM_TIMEOUT_MS, 60 s) and then
# in its boundary request (300 s), so "the cut-off rank still runs 9 s after the cut" fails
# part 1; and after omni-launch's SIGKILL every rank waits in its boundary request for 300 s,
# so "ranks still running 9 s after omni-launch's SIGKILL" fails part 2.
. "$(dirname "$0")/lib.sh"
train_commands
cluster_acquire 3 0 netns
cd "$work"
base=$(sed -n 's/^PORT_BASE=//p' "$CLUSTER_DIR/cluster.env")
cname=$(scontrol show config | sed -n 's/^ClusterName *= *//p')
[ -n "$base" ] && [ -n "$cname" ] || fail "cannot read the cluster's port base and name"
T=6
# 15 steps per epoch (720 / 48), 3 epochs; B = 48 with b = 4 divides b*d for d = 2, 3.
train="--steps 45 --dataset-size 720 --lr 0.05 --warmup 5 --global-batch 48 --micro-batch 4"
write_static_job static.sh 3 "$train"
timeout 120 sbatch --wait -N3 --ntasks-per-node=1 -t 5 -o "$work/static.out" static.sh >/dev/null ||
  { cat "$work/static.out" >&2; fail "the static job failed"; }

# ranks_of JOB UNIT: the pids of the job's ranks of UNIT on any host (rank-pids, which reads
# the environment the ranks got from Slurm; the hosts share this machine's pid namespace).
ranks_of() { SLURM_JOB_ID=$1 SLURM_CLUSTER_NAME=$cname "$rank_pids" "$2"; }
# wait_gone SECONDS PID...: 0 once none of the PIDs runs, 1 after SECONDS.
wait_gone() {
  local deadline=$(($(date +%s%N) / 1000000 + $1 * 1000)) p alive
  shift
  while :; do
    alive=0
    for p in "$@"; do proc_alive "$p" && alive=1; done
    [ $alive = 0 ] && return 0
    [ $(($(date +%s%N) / 1000000)) -lt "$deadline" ] || return 1
    sleep 0.05
  done
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# 1. The link cut.
start_training cut 3 "--units 3 --boundary-timeout $T" "$train --pace-ms 100 --ckpt $work/cut-ckpt --ckpt-every 5"
"$at_step" "$work/cut.jsonl" 12 60 || fail "the link-cut job never reached step 12: $(tail -5 "$work/cut.out")"
# The rank of unit 2, or of unit 1 if unit 2 runs on the batch host (the coordinator's).
victim= node=
for u in 2 1; do
  victim=$(ranks_of "$job" $u | head -n 1)
  [ -n "$victim" ] || fail "no rank of unit $u found"
  node=$(tr '\0' '\n' <"/proc/$victim/environ" | sed -n 's/^SLURMD_NODENAME=//p')
  [ "$node" != n1 ] && break
done
[ -n "$node" ] && [ "$node" != n1 ] || fail "no unit runs off the batch host n1"
ns=/run/netns/omni$base-$node
t_cut=$(now_ms)
nsenter --net="$ns" ip link set eth0 down || fail "cannot cut $node's link"
# Whatever happens below, the link comes back before the cluster goes down.
# At exit the cut link comes back ('|| true': its namespace may be gone already).
trap 'nsenter --net="$ns" ip link set eth0 up 2>/dev/null || true; cluster_release; cleanup_work' EXIT
note "cut $node's link at step $(tail -n 1 cut.jsonl | sed 's/^{"step": \([0-9]*\),.*/\1/') (rank pid $victim of unit $u)"
# The cut-off rank stops by itself, its link still down: no reply for T, then out.
wait_gone $((T + 3)) "$victim" || fail "the cut-off rank still runs $((T + 3)) s after the cut"
t_gone=$(now_ms)
# The survivors went on: a generation without the cut-off unit trained a step.
world=
for _ in $(seq 200); do
  world=$(tail -n 1 cut.jsonl | sed -n 's/.*"world": \([0-9]*\).*/\1/p')
  [ "$world" = 2 ] && break
  sleep 0.05
done
[ "$world" = 2 ] || fail "the survivors trained no step without the cut-off unit within 10 s after it left"
t_on=$(now_ms)
nsenter --net="$ns" ip link set eth0 up || fail "cannot restore $node's link"
wait $sbatch_pid || { cat "$work/cut.out" >&2; fail "the link-cut job failed"; }
# Shown for the log only; '|| true': the checks below fail a run without these lines.
grep -E 'lost|fenced|no reply|rewound|went on|launch-exit' cut.out || true
same_training cut 45 720 15 redone-ok
/usr/bin/python3 - cut-events.jsonl "$t_cut" >cut-times.txt <<'PY' || fail "link cut events: $(cat cut-events.jsonl)"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
got = [(e["reason"], e["old_world"], e["new_world"]) for e in ev]
assert got == [("initial", 0, 3), ("lost", 3, 2), ("stop", 2, 0)], got
lost = ev[1]
print(lost["unix_ms"] - int(sys.argv[2]), lost["pause_ms"], lost["step"])
PY
read -r detect pause lost_step <cut-times.txt
# Lost after T (its last heartbeat came up to T/8 before the cut), not long after.
[ "$detect" -ge $((T * 1000 - 1000)) ] && [ "$detect" -le $((T * 1000 + 3000)) ] ||
  fail "the cut-off rank was declared lost $detect ms after the cut (T = $T s)"
grep -q "has had no reply from the coordinator for" cut.out || fail "the cut-off rank did not say why it left"
grep -Eq "step omni-u$u failed \(exit 1\); the job went on without units \[$u\]" cut.out ||
  fail "omni-launch did not report the cut-off unit's exit"
expect_eq "omni-launch exit after a link cut" "$(sed -n 's/^launch-exit //p' cut.out)" 0
"$top_build/ckpt/omni-ckpt" ls cut-ckpt >cut-ckpt.txt 2>&1 || { cat cut-ckpt.txt; fail "omni-ckpt ls"; }
expect_eq "complete checkpoints (every 5 steps)" "$(grep -c '^ *step-[0-9]* *[0-9]* *complete' cut-ckpt.txt)" 9
! grep -v '^ *step-[0-9]* *[0-9]* *complete' cut-ckpt.txt | grep -q 'step-' || fail "an incomplete checkpoint: $(cat cut-ckpt.txt)"
note "link cut: declared lost after $detect ms, cut-off rank gone after $((t_gone - t_cut)) ms, survivors trained on after $((t_on - t_cut)) ms (pause $pause ms)"

# 2. omni-launch killed with SIGKILL; the batch script lives on and watches the ranks.
mv samples samples-cut
mkdir -p samples-kill0 samples-kill1
cat >kill.sh <<EOS
#!/bin/bash
set -u
run=\${SLURM_RESTART_COUNT:-0}
echo "run \$run"
"$launch" --units 3 --boundary-timeout $T --events "$work/kill-events.jsonl" \
  -- "$demo" $train --pace-ms 100 --ckpt "$work/kill-ckpt" --ckpt-every 5 --metrics "$work/kill.jsonl" \
  --sample-log "$work/samples-kill\$run" &
pid=\$!
if [ "\$run" = 0 ]; then
  "$at_step" "$work/kill.jsonl" 17 60 || exit 11
  ranks=\$(for u in 0 1 2; do "$rank_pids" \$u; done)
  kill -KILL \$pid
  echo "killed omni-launch at step \$(tail -n 1 "$work/kill.jsonl" | sed 's/^{"step": \([0-9]*\),.*/\1/')"
  t0=\$(date +%s%N)
  # No omni-launch, no coordinator: the ranks must stop by themselves.
  for _ in \$(seq $(((T + 3) * 20))); do
    alive=0
    for p in \$ranks; do kill -0 \$p 2>/dev/null && alive=1; done
    [ \$alive = 0 ] && break
    sleep 0.05
  done
  [ \$alive = 0 ] && echo "ranks-gone-ms \$(( (\$(date +%s%N) - t0) / 1000000 ))" ||
    echo "ranks still running $((T + 3)) s after omni-launch's SIGKILL: \$ranks"
  exit 9
fi
wait \$pid
rc=\$?
echo "launch-exit \$rc"
exit \$rc
EOS
chmod +x kill.sh
out=$(timeout 120 sbatch --wait -N3 --ntasks-per-node=1 -t 5 --open-mode=append -o "$work/kill.out" --parsable kill.sh) &&
  fail "the job whose omni-launch was killed succeeded"
job=${out%%;*}
[ -n "$job" ] || fail "no job id from sbatch"
# Shown for the log only; '|| true': the checks below fail a run without these lines.
grep -E '^run|ranks|no reply' kill.out || true
gone=$(sed -n 's/^ranks-gone-ms //p' kill.out)
[ -n "$gone" ] || fail "after omni-launch's SIGKILL: $(grep 'ranks still' kill.out || tail -5 kill.out)"
expect_eq "job $job state after omni-launch's SIGKILL" "$(job_state "$job")" FAILED
# omni-launch died without removing the job's files (its secret among them).
jobdir=/tmp/omni-$(id -u)/job-$cname-$job
[ -e "$jobdir/secret" ] || fail "no $jobdir/secret: the test looks in the wrong place"
t_rq=$(now_ms)
scontrol requeue "$job" || fail "scontrol requeue $job failed"
# Slurm holds a requeued job for AuthInfo's cred_expire + 1 s (21 s on this cluster) so that
# its new launch credential is newer than the old one's revocation; a second suffices here.
sleep 1
scontrol update JobId="$job" StartTime=now || fail "cannot release the requeued job $job"
for _ in $(seq 1200); do
  # '|| true': squeue fails once the job has left slurmctld's memory; empty means gone.
  s=$(squeue -h -j "$job" -o %T 2>/dev/null || true)
  [ -z "$s" ] && break
  sleep 0.1
done
[ -z "$s" ] || fail "the requeued job $job did not end: $s"
expect_eq "job $job state after the requeue" "$(job_state "$job")" COMPLETED
# Shown for the log only; '|| true': a run without these lines fails the checks below.
grep -E '^run|resumed|launch-exit' kill.out || true
expect_eq "runs of the batch script" "$(grep -c '^run ' kill.out)" 2
# The newest checkpoint (every 5 steps) at the step omni-launch was killed at or just before
# (the one of that very step may have been under way).
killed=$(sed -n 's/^killed omni-launch at step //p' kill.out)
resume=$(sed -n "s|^omni-train-demo: resumed at step \([0-9]*\) from $work/kill-ckpt.*|\1|p" kill.out)
[ -n "$killed" ] && [ -n "$resume" ] || fail "no step of the kill or of the resume in kill.out"
[ $((resume % 5)) = 0 ] && [ "$resume" -le "$killed" ] && [ "$resume" -gt $((killed - 10)) ] ||
  fail "killed at step $killed, the requeued run resumed at step $resume"
# The first run's sample logs count up to the checkpoint it resumed from, the second's after.
mkdir -p samples
for f in samples-kill0/*.samples; do awk -v r="$resume" '$1 <= r' "$f" >"samples/run0-$(basename "$f")"; done
for f in samples-kill1/*.samples; do cp "$f" "samples/run1-$(basename "$f")"; done
same_training kill 45 720 15 redone-ok
# The requeued run removed what the killed one left (the directory too, when nothing else
# is in it: a cluster on the same ports before this one may have left an events file there).
[ ! -e "$jobdir/secret" ] && [ ! -e "$jobdir/coordinator" ] || fail "$jobdir still holds: $(ls -a "$jobdir")"
note "omni-launch SIGKILL: every rank gone $gone ms after it (T = $T s); requeued, resumed at step $resume bitwise ($(( $(now_ms) - t_rq )) ms from requeue to the end)"
note "ok"
