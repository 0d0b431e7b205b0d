#!/usr/bin/env bash
# omni-ctl grow via a satellite job on the local cluster (four hosts): omni-train-demo under
# omni-launch with 2 units of 1 rank on 2 exclusive nodes, grown to 4 units at step 5 by
# `omni-ctl grow --units 4`: omni-launch submits a satellite job (omni-sat-J, in the
# preemptible partition scavenger) for the two new units, which Slurm runs on the two idle
# nodes, and they join at a boundary. Then a job of the omni partition preempts the
# satellite, whose units leave at a boundary. Against a static run of 4 units:
#  - per-step loss, LR and samples bitwise the same, no step trained twice, every sample of
#    each epoch once; worlds 2 -> 4 -> 2, the events an initial 2 and planned 2 -> 4 -> 2 (a
#    graceful leave, not a loss). Slurm's grace-time SIGTERM reaches the satellite's steps
#    only; a sentinel in each step passes it on to the satellite's omni-launch as SIGURG.
#    Without it (tried) omni-launch would only read its job at its 120 s safety look, after
#    the 30 s GraceTime: "units after the preemption: got '1', expected '0'";
#  - the satellite ran on nodes other than the job's, and the job secret appears in no
#    process's command line, in neither squeue nor scontrol show job, nor in the satellite's
#    batch script;
#  - a grow Slurm cannot run now (the preemptor holds the nodes) stays pending and says so,
#    `omni-ctl grow --cancel` withdraws it and its satellite job is gone; one left pending
#    when the training ends is cancelled with the job: no omni-sat job outlives it;
#  - bad requests (not a grow, a size GA forbids, beyond the elastic range, 0, an unknown
#    --via) are refused with a clear message, and the job goes on undisturbed; a grow --via
#    expand, which this select/cons_tres cluster cannot serve, is withdrawn saying why;
#  - scancel of a job that has grown into a satellite ends the satellite too.
. "$(dirname "$0")/lib.sh"
train_commands
cluster_acquire 4 0 netns
cd "$work"
# 15 steps per epoch (960 / 64), 6 epochs; B = 64 with b = 4 allows d = 1, 2, 4, 8
# (GA = 16 / d), so 3 units are refused.
schedule="--steps 90 --dataset-size 960 --lr 0.05 --warmup 5"
train="$schedule --global-batch 64 --micro-batch 4"

write_static_job static.sh 4 "$train"
elastic_job grow.sh grow "--units 2 --boundary-timeout 30 --satellite-args=--partition=scavenger" \
  "$train --pace-ms 200 --sample-log $work/samples" <<EOS
at_step 5 || exit 11
bad same grow --units 2
bad ga grow --units 3
bad range grow --units 9
bad zero grow --units 0
bad via grow --units 4 --via elsewhere
bad expand grow --units 4 --via expand --wait 30
"$ctl" grow --units 4 --wait 120 >"$work/grow-ctl.out" 2>&1
echo "grow-exit \$?"
squeue --me -h --name "omni-sat-\$SLURM_JOB_ID" -o '%i %T %N' >"$work/satellite.txt"
sat=\$(awk 'NR == 1 { print \$1 }' "$work/satellite.txt")
# Everywhere the secret must not be: command lines, squeue, scontrol, the batch script.
secret=\$(cat "/tmp/omni-\$(id -u)/job-\$SLURM_CLUSTER_NAME-\$SLURM_JOB_ID/secret")
{ ps -eo args; squeue -o '%all'; scontrol show job -d "\$sat"; scontrol write batch_script "\$sat" -; } \
  >"$work/public.txt" 2>&1
grep -cF -- "\$secret" "$work/public.txt" | sed 's/^/secret-seen /'
# The satellite steps' sentinels (named omni-launch, --exec-task their first argument, as
# the shim itself execs the rank) hold no descriptor but 0-2, and a SIGTERM that is no
# preemption (scancel --batch --signal=URG, then omni-launch finds nothing to do) leaves each
# alive with its scancel reaped. Before, it exec'd scancel itself and stayed a zombie
# (state Z) under the rank, holding the shim's other descriptors.
# (Of this satellite only: another cluster on the machine may have sentinels of its own.)
sentinels=\$(for p in \$(pgrep -x omni-launch); do
  [ "\$(tr '\0' '\n' </proc/\$p/cmdline 2>/dev/null | sed -n 2p)" = --exec-task ] &&
    tr '\0' '\n' </proc/\$p/environ 2>/dev/null | grep -qx "SLURM_JOB_ID=\$sat" && echo \$p; done | tr '\n' ' ')
echo "sentinels \$sentinels"
for s in \$sentinels; do echo "sentinel-fds \$(ls /proc/\$s/fd | sort -n | tr '\n' ' ')"; kill -TERM \$s; done
sleep 2
for s in \$sentinels; do
  echo "sentinel-after-term \$(awk '{ print \$3 }' /proc/\$s/stat 2>/dev/null || echo gone) children \$(pgrep -c -P \$s)"
done
# A job of the omni partition on the satellite's nodes preempts it (GraceTime 30 s): its
# units leave at a boundary, well within the grace time.
nodes=\$(awk 'NR == 1 { print \$3 }' "$work/satellite.txt")
preemptor=\$(sbatch --parsable -p omni -w "\$nodes" -N2 --exclusive -t 2 -o /dev/null --wrap 'sleep 100')
echo "preemptor \$preemptor"
units_are 2; echo "preempted-units-exit \$?"
"$ctl" status --json >"$work/after-preemption.json"
# The preemptor holds those nodes now: a grow to 4 units stays pending, then is withdrawn.
"$ctl" grow --units 4 --wait 2 >"$work/pending-ctl.out" 2>&1
echo "pending-exit \$?"
squeue --me -h --name "omni-sat-\$SLURM_JOB_ID" -t PENDING -o '%i' >"$work/pending-before.txt"
"$ctl" grow --cancel >"$work/cancel-ctl.out" 2>&1
echo "cancel-exit \$?"
for _ in \$(seq 100); do
  [ -z "\$(squeue --me -h --name "omni-sat-\$SLURM_JOB_ID" -t PENDING -o '%i')" ] && break
  sleep 0.1
done
squeue --me -h --name "omni-sat-\$SLURM_JOB_ID" -t PENDING -o '%i' >"$work/pending-after.txt"
# And one left pending to the end of the training.
"$ctl" grow --units 4 --wait 0 >"$work/left-ctl.out" 2>&1
echo "left-exit \$?"
EOS
mkdir -p "$work/samples"
out=$(timeout 240 sbatch --wait -N4 -t 5 -o "$work/static.out" --parsable static.sh) ||
  { cat "$work/static.out" >&2; fail "the static job failed"; }
job=$(timeout 300 sbatch --wait -N2 --exclusive --ntasks-per-node=1 -t 5 --omni-elastic=1:8 -o "$work/grow.out" --parsable grow.sh) ||
  { cat "$work/grow.out" "$work"/*.out >&2; fail "the growing job failed"; }
job=${job%%;*}
preemptor=$(sed -n 's/^preemptor //p' "$work/grow.out")
# The preemptor only held the nodes (it is bounded by -t 2 should this line not be reached).
[ -z "$preemptor" ] || scancel "$preemptor"
# Shown for the log only; '|| true': a job that printed none of these lines fails the checks below.
grep -E '^(bad|grow-exit|secret-seen|sentinel|preempt|pending-exit|cancel-exit|left-exit|launch-exit)|world [0-9]+ -> [0-9]+|satellite' "$work/grow.out" || true
cat "$work/grow-ctl.out" "$work/pending-ctl.out" "$work/cancel-ctl.out"

# The refusals: exit 1 (2 for bad usage) with a message saying why; the job went on.
for c in same ga range; do
  expect_eq "omni-ctl grow ($c) exit" "$(sed -n "s/^bad $c //p" "$work/grow.out")" 1
done
# Slurm's job expansion on a select/cons_tres cluster would leave the added nodes without
# cores (launch/expansion.h): --via expand is withdrawn saying so; --via auto takes a satellite.
expect_eq "omni-ctl grow --via expand (select/cons_tres) exit" "$(sed -n "s/^bad expand //p" "$work/grow.out")" 1
grep -q "the grow to 4 units was withdrawn" "$work/bad-expand.out" || fail "grow --via expand: $(cat "$work/bad-expand.out")"
grep -q "cannot grow via expand: SelectType is select/cons_tres: Slurm's cons_tres merge leaves the nodes" "$work/grow.out" ||
  fail "omni-launch did not say why it cannot expand the job"
grep -q "growing by satellite, not by expansion: SelectType is select/cons_tres" "$work/grow.out" ||
  fail "omni-launch did not say why --via auto grew by satellite"
for c in zero via; do
  expect_eq "omni-ctl grow ($c) exit" "$(sed -n "s/^bad $c //p" "$work/grow.out")" 2
done
grep -q "is not above the job's 2 units" "$work/bad-same.out" || fail "grow to 2: $(cat "$work/bad-same.out")"
grep -q "unit counts that work: 1, 2, 4, 8" "$work/bad-ga.out" || fail "grow to 3: $(cat "$work/bad-ga.out")"
grep -q "outside the elastic range 1..8" "$work/bad-range.out" || fail "grow to 9: $(cat "$work/bad-range.out")"
grep -q -- "--units: '0'" "$work/bad-zero.out" || fail "grow to 0: $(cat "$work/bad-zero.out")"
grep -q -- "--via 'elsewhere': expected auto, satellite, expand or allocation" "$work/bad-via.out" || fail "--via: $(cat "$work/bad-via.out")"

# The grow: applied, in a satellite job on the two nodes the job did not have.
expect_eq "omni-ctl grow --units 4 exit" "$(sed -n 's/^grow-exit //p' "$work/grow.out")" 0
grep -q ": 4 units at step" "$work/grow-ctl.out" || fail "omni-ctl grow did not report 4 units: $(cat "$work/grow-ctl.out")"
read -r sat sat_state sat_nodes <"$work/satellite.txt" || fail "no satellite job was running after the grow"
expect_eq "the satellite's state after the grow" "$sat_state" RUNNING
job_nodes=$(sacct -n -X -j "$job" -o NodeList%100 | xargs)
for n in $(scontrol show hostnames "$sat_nodes"); do
  scontrol show hostnames "$job_nodes" | grep -qx "$n" && fail "satellite node $n is one of the job's ($job_nodes)"
done
expect_eq "satellite nodes" "$(scontrol show hostnames "$sat_nodes" | wc -l)" 2
expect_eq "lines with the job secret in ps, squeue, scontrol and the batch script" \
  "$(sed -n 's/^secret-seen //p' "$work/grow.out")" 0

# The sentinels: at least one (a satellite step's first task), each with 0-2 open only, and
# alive (sleeping) with no child after a SIGTERM that was no preemption.
[ -n "$(sed -n 's/^sentinels //p' "$work/grow.out" | tr -d ' ')" ] || fail "no preemption sentinel in the satellite's steps"
# '|| true' on both: grep -v finding no bad line (exit 1) is the pass case, checked just after.
bad_fds=$(sed -n 's/^sentinel-fds //p' "$work/grow.out" | grep -vx '0 1 2 ' || true)
[ -z "$bad_fds" ] || fail "a sentinel holds descriptors other than 0-2: $bad_fds"
bad_state=$(sed -n 's/^sentinel-after-term //p' "$work/grow.out" | grep -vE '^S children 0$' || true)
[ -z "$bad_state" ] || fail "a sentinel after SIGTERM: '$bad_state', expected 'S children 0' (alive, scancel reaped)"
# The preemption: the satellite's units left at a boundary (its omni-launch said so), and the
# satellite ended before its grace time ran out.
expect_eq "units after the preemption" "$(sed -n 's/^preempted-units-exit //p' "$work/grow.out")" 0
grep -q "Slurm is preempting satellite job $sat: units \[2,3\] leave the job at the next boundary" \
  "$work/slurm-$sat.out" || { cat "$work/slurm-$sat.out" >&2; fail "the satellite did not leave on preemption"; }

/usr/bin/python3 - "$work/after-preemption.json" <<'PY' || fail "the status after the preemption (above)"
import json, sys
r = json.load(open(sys.argv[1]))["last_resize"]
assert r["kind"] == "preemption" and (r["old_units"], r["new_units"]) == (4, 2), r
print("ok: last resize", r)
PY
# The grow Slurm could not run: pending, said so, withdrawn, its satellite cancelled.
expect_eq "omni-ctl grow --units 4 --wait 2 exit" "$(sed -n 's/^pending-exit //p' "$work/grow.out")" 1
grep -q "grow to 4 units did not apply within 2 s; it stays pending" "$work/pending-ctl.out" || fail "the pending grow: $(cat "$work/pending-ctl.out")"
expect_eq "pending satellites before the cancel" "$(wc -l <"$work/pending-before.txt")" 1
expect_eq "omni-ctl grow --cancel exit" "$(sed -n 's/^cancel-exit //p' "$work/grow.out")" 0
grep -q "grow to 4 units withdrawn; the job stays at 2 units" "$work/cancel-ctl.out" || fail "the cancel: $(cat "$work/cancel-ctl.out")"
expect_eq "pending satellites after the cancel" "$(wc -l <"$work/pending-after.txt")" 0
expect_eq "omni-ctl grow --units 4 --wait 0 exit" "$(sed -n 's/^left-exit //p' "$work/grow.out")" 0
# No satellite outlives the job: the preempted one left, the pending one was cancelled.
expect_eq "omni-sat-$job jobs after the job" "$(squeue -h --name "omni-sat-$job" -o %i | wc -l)" 0
expect_eq "satellite $sat's exit code" "$(sacct -n -X -j "$sat" -o ExitCode | xargs)" 0:0
expect_eq "omni-launch exit" "$(sed -n 's/^launch-exit //p' "$work/grow.out")" 0

# Every step once, in order, bitwise the static run's.
/usr/bin/python3 "$top_src/tests/integration/same-steps.py" "$work/static.jsonl" "$work/grow.jsonl" 90 ||
  fail "static and growing runs differ (above)"
planned_worlds grow 2 4 2
/usr/bin/python3 "$top_src/tests/integration/exactly-once.py" "$work/samples" 960 15 90 ||
  fail "the growing run's samples (above)"

# scancel of a job whose units train in a satellite: the satellite goes with it.
elastic_job cancel.sh cancel "--units 1" \
  "--steps 3000 --dataset-size 960 --lr 0.05 --warmup 5 --global-batch 64 --micro-batch 4 --pace-ms 50" <<EOS
at_step 3 || exit 11
"$ctl" grow --units 2 --wait 120 >"$work/cancel-grow.out" 2>&1
echo "grow-exit \$?"
EOS
cjob=$(sbatch --parsable -N1 --exclusive --ntasks-per-node=1 -t 5 --omni-elastic=1:4 -o "$work/cancel.out" cancel.sh)
cjob=${cjob%%;*}
for _ in $(seq 600); do
  grep -qE '^(grow|launch)-exit' "$work/cancel.out" 2>/dev/null && break
  sleep 0.2
done
expect_eq "omni-ctl grow exit before the scancel" "$(sed -n 's/^grow-exit //p' "$work/cancel.out")" 0
csat=$(squeue -h --name "omni-sat-$cjob" -t RUNNING -o %i)
[ -n "$csat" ] || fail "job $cjob has no running satellite after its grow: $(cat "$work/cancel.out")"
scancel "$cjob"
start=$SECONDS
for _ in $(seq 300); do
  [ -z "$(squeue -h --name "omni-sat-$cjob" -o %i)$(squeue -h -j "$cjob" -t PD,R,CG -o %i)" ] && break
  sleep 0.1
done
expect_eq "satellites of job $cjob left after its scancel" "$(squeue -h --name "omni-sat-$cjob" -o %i | wc -l)" 0
grep -q "got signal SIGTERM: cancelling satellite job(s) $csat" "$work/cancel.out" ||
  { cat "$work/cancel.out" >&2; fail "omni-launch did not cancel satellite $csat at its scancel"; }
# Nor does its omni-launch linger (the batch shell dies first here, and proctrack/linuxproc
# then loses track of it: it must end by itself).
for _ in $(seq 150); do
  pgrep -f -- "$work/cancel-events.jsonl" >/dev/null || break
  sleep 0.1
done
! pgrep -af -- "$work/cancel-events.jsonl" || fail "omni-launch of job $cjob still runs 15 s after its scancel"
note "scancel of job $cjob ended it and its satellite $csat in $((SECONDS - start)) s"
note "ok: omni-ctl grow 2 -> 4 via satellite job $sat on $sat_nodes, preempted 4 -> 2 at a boundary; bitwise equal to the static run; pending grow withdrawn and cancelled"
