#!/usr/bin/env bash
# Preemption of a training job with PreemptMode=REQUEUE, on the local cluster (four hosts):
# omni-train-demo under omni-launch, 2 units on 2 exclusive nodes of the preemptible
# partition scavenger (GraceTime 30 s), checkpoints every 10 steps. At step 15 a job of the
# omni partition asks for those two nodes. Slurm signals the job's steps (not its batch
# script) with SIGTERM; libomni holds it in the ranks and asks for a stop, so every rank
# stops at the same boundary and writes a checkpoint there. omni-launch sees that Slurm is
# preempting the job and waits for it, so that Slurm requeues the job at the end of its
# grace time (built against Slurm 24.05 or newer it ends the batch script at once, which
# requeues it there; waiting, the requeued run was requeued once more on 24.11.5 and the
# "runs of the batch script" check failed with 3); the requeued job resumes from that
# checkpoint and finishes. Checked:
#  - the ranks stopped at a boundary within a few steps of the preemption, well inside the
#    grace time, with "SIGTERM to rank" as the stop's reason in the events file, and a
#    checkpoint of exactly that step;
#  - Slurm requeued the job once (Restarts=1) and it ended COMPLETED with exit code 0;
#  - the second run resumed at that step: no step trained twice, every sample of each epoch
#    once, and the per-step loss, LR and samples bitwise those of a static run that was
#    never interrupted;
#  - the stop lost nothing the last periodic checkpoint would have cost: steps between it
#    and the stop were not recomputed (the sample logs show each step once);
#  - omni-ctl status (--json and text) and omni-launch's metrics file name the last
#    checkpoint the ranks reported.
. "$(dirname "$0")/lib.sh"
train_commands
cluster_acquire 4 0 netns
cd "$work"
# 15 steps per epoch (480 / 32), 4 epochs.
train="--steps 60 --dataset-size 480 --lr 0.05 --warmup 5 --global-batch 32 --micro-batch 4"

write_static_job static.sh 2 "$train"
mkdir -p "$work/samples"
# The body runs in both runs of the batch script; only the first one calls for a preemptor.
elastic_job pre.sh pre "--units 2 --metrics-file $work/pre.prom" \
  "$train --pace-ms 150 --ckpt $work/ckpt --ckpt-every 10 --sample-log $work/samples" <<EOS
echo "run \${SLURM_RESTART_COUNT:-0} on \$SLURM_JOB_NODELIST"
if [ "\${SLURM_RESTART_COUNT:-0}" = 0 ]; then
  at_step 15 || exit 11
  preemptor=\$(sbatch --parsable -p omni -w "\$SLURM_JOB_NODELIST" -N2 --exclusive -t 2 -o /dev/null --wrap 'sleep 3')
  echo "preemptor \$preemptor at \$(date +%s)"
else
  # The last checkpoint in the status and the metrics, a few steps after one.
  at_step 34 || exit 12
  "$ctl" status --json >"$work/status-run1.json"
  "$ctl" status >"$work/status-run1.txt"
  sleep 1.5  # omni-launch writes the metrics file at most once a second
  cp "$work/pre.prom" "$work/pre-run1.prom"
fi
EOS
out=$(timeout 240 sbatch --wait -N2 -t 5 -o "$work/static.out" --parsable static.sh) ||
  { cat "$work/static.out" >&2; fail "the static job failed"; }
job=$(sbatch_until_end 300 -p scavenger --requeue --open-mode=append -N2 --exclusive -t 5 \
  -o "$work/pre.out" pre.sh) ||
  { cat "$work/pre.out" >&2; fail "the preempted job failed"; }
job=${job%%;*}
# Shown for the log only; '|| true': a job that printed none of these lines fails the checks below.
grep -E '^(run|preemptor|launch-exit)|STOP|preempt|resumed|Slurm is' "$work/pre.out" || true

# Slurm preempted it once, requeued it, and the second run completed.
expect_eq "runs of the batch script" "$(grep -c '^run ' "$work/pre.out")" 2
expect_eq "job $job restarts" "$(scontrol show job "$job" | grep -o 'Restarts=[0-9]*')" Restarts=1
expect_eq "job $job state" "$(job_state "$job")" COMPLETED
expect_eq "omni-launch exit of the second run" "$(sed -n 's/^launch-exit //p' "$work/pre.out" | tail -n1)" 0

# The first run: a stop at a boundary asked for by the signalled ranks, its checkpoint, and
# omni-launch waiting for Slurm instead of completing the job.
/usr/bin/python3 - "$work/pre-events.jsonl" >"$work/stop-step" <<'PY' || fail "events: $(cat "$work/pre-events.jsonl")"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
stops = [e for e in ev if e["reason"] == "stop"]
assert len(stops) == 2, [(e["reason"], e.get("detail")) for e in ev]
first, last = stops
assert first["detail"].startswith("SIGTERM to rank "), first
assert 15 <= first["step"] < 40, first
assert last["detail"] == "ranks-finished" and last["step"] == 60, last
assert not any(e["reason"] == "lost" for e in ev), ev
print(first["step"])
PY
stop=$(cat "$work/stop-step")
note "the ranks stopped at the boundary after step $stop"
grep -q "Slurm is preempting job $job: the ranks stopped at a boundary with their checkpoint" "$work/pre.out" ||
  fail "omni-launch did not wait for the preemption"
grep -q "resumed at step $stop from $work/ckpt" "$work/pre.out" || fail "the second run did not resume at step $stop"
"$top_build/ckpt/omni-ckpt" ls "$work/ckpt" >"$work/ckpt-ls.txt" || fail "omni-ckpt ls failed"
cat "$work/ckpt-ls.txt"
grep -Eq "(^|[^0-9])$stop([^0-9]|$)" "$work/ckpt-ls.txt" || fail "no checkpoint of step $stop"

# The second run's status and metrics name the last checkpoint: a step of --ckpt-every 10
# past 30, in the checkpoint directory, reported within the last minute.
/usr/bin/python3 - "$work/status-run1.json" "$work/pre-run1.prom" "$work/ckpt" <<'PY' ||
import json, re, sys, time
s = json.load(open(sys.argv[1]))
c = s["last_checkpoint"]
assert c and c["step"] % 10 == 0 and 30 <= c["step"] <= s["last_step"], (c, s["last_step"])
assert c["location"].startswith(sys.argv[3] + "/"), c
assert 0 <= time.time() - c["time"] < 60, c
prom = open(sys.argv[2]).read()
m = re.search(r'^omni_last_checkpoint_step\{job="\d+"\} (\d+)$', prom, re.M)
assert m and int(m.group(1)) % 10 == 0 and int(m.group(1)) >= 30, prom
print("ok: last checkpoint", c, "metrics step", m.group(1))
PY
  fail "the last checkpoint in status and metrics (above)"
grep -q "^last checkpoint:  step [0-9]*0 at 20[0-9-]*T[0-9:]*Z in $work/ckpt/" "$work/status-run1.txt" ||
  fail "omni-ctl status shows no last checkpoint: $(cat "$work/status-run1.txt")"

# Every step once, in order, bitwise the static run's; every sample once per epoch.
same_training pre 60 480 15
note "ok: preempted at step $stop with a checkpoint there, requeued, resumed, bitwise the static run"
