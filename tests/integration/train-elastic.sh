#!/usr/bin/env bash
# The product's promise, end to end on the local cluster: omni-train-demo under omni-launch,
# a static run of 4 units against
#  - an elastic run 4 -> 2 -> 3 -> 4 (omni-ctl reshapes at step boundaries, the last one a
#    grow with a joining srun step), its batch sizes given to sbatch, not to the trainer:
#    per-step loss, LR and samples bitwise the same, every sample of every epoch used
#    exactly once (the sets of indices the ranks recorded, tests/integration/exactly-once.py);
#    it checkpoints after every step, so every resize lands on a checkpoint step, which the
#    joining ranks must take part in;
#  - a run whose unit 3 is killed with SIGKILL at step ~25: the survivors detect it, rewind
#    to the last checkpoint (step 20) with 3 units and finish with the static run's losses;
#  - a run with --min-units 3 that loses two units: after the second loss the job stops
#    (below-min), the trainer says which checkpoint to restart from and exits 3.
. "$(dirname "$0")/lib.sh"
train_commands
# Every node its own host (omni-cluster --hosts netns): ranks on four hosts, the coordinator
# on the batch host's address, Gloo on each node's own.
cluster_acquire 4 0 netns
cd "$work"
# 20 steps per epoch (960 / 48), 3 epochs; B = 48 with b = 4 divides b*d for d = 2, 3, 4.
# The elastic job gets its batch sizes from sbatch (--omni-global-batch, --omni-micro-batch,
# checked at submit for 2..4 units; the spank plugin hands them to every task as OMNI_*),
# the others from the trainer's options.
schedule="--steps 60 --dataset-size 960 --lr 0.05 --warmup 5"
train="$schedule --global-batch 48 --micro-batch 4"

write_static_job static.sh 4 "$train"
elastic_job elastic.sh elastic "--units 4 --boundary-timeout 30" \
  "$schedule --pace-ms 60 --sample-log $work/samples-elastic --ckpt $work/elastic-ckpt --ckpt-every 1" <<EOS
at_step 10 || exit 11
srun --overlap -N4 --ntasks-per-node=1 bash -c 'ss -Htanp | sed "s/^/\$SLURMD_NODENAME /"' >"$work/sockets.txt"
"$ctl" reshape --units 2 || exit 11
at_step 25 && "$ctl" reshape --units 3 || exit 12
at_step 40 && "$ctl" reshape --units 4 || exit 13
EOS
cat >lost.sh <<EOS
#!/bin/bash
# Written by train-elastic.sh: kill -9 the rank of unit 3 at step 25.
set -u
export OMNI_COMM_TIMEOUT_MS=5000   # survivors not next to the dead rank give up this fast
"$launch" --units 4 --events "$work/lost-events.jsonl" --boundary-timeout 20 \
  -- "$demo" $train --pace-ms 60 --ckpt "$work/lost-ckpt" --ckpt-every 10 --metrics "$work/lost.jsonl" \
  --sample-log "$work/samples-lost" &
pid=\$!
"$at_step" "$work/lost.jsonl" 25
victim=\$("$rank_pids" 3 | head -n 1)
[ -n "\$victim" ] || { echo "no rank of unit 3 found"; exit 20; }
echo "killing unit 3 rank pid \$victim at step 25 or later"
kill -9 "\$victim"
wait \$pid
echo "launch-exit \$?"
exit 0
EOS
cat >belowmin.sh <<EOS
#!/bin/bash
# Written by train-elastic.sh: lose unit 3 at step 15, then unit 2 at step 25, with MIN = 3.
set -u
export OMNI_COMM_TIMEOUT_MS=5000
"$launch" --units 4 --min-units 3 --events "$work/belowmin-events.jsonl" --boundary-timeout 20 \
  -- "$demo" $train --pace-ms 60 --ckpt "$work/belowmin-ckpt" --ckpt-every 10 --metrics "$work/belowmin.jsonl" &
pid=\$!
kill_unit() {  # kill_unit UNIT STEP: SIGKILL the rank of UNIT once the metrics reach STEP
  "$at_step" "$work/belowmin.jsonl" "\$2"
  for p in \$("$rank_pids" "\$1"); do kill -9 \$p && echo "killed unit \$1"; done
}
kill_unit 3 15
kill_unit 2 25
wait \$pid
echo "launch-exit \$?"
exit 0
EOS
chmod +x lost.sh belowmin.sh
mkdir -p "$work/samples-elastic" "$work/samples-lost"
once=$top_src/tests/integration/exactly-once.py
out=$(timeout 240 sbatch --wait -N4 -t 5 -o "$work/static.out" --parsable static.sh) ||
  { cat "$work/static.out" >&2; fail "the static job failed"; }
out=$(timeout 300 sbatch --wait -N4 -t 5 --omni-elastic=2:4 --omni-global-batch=48 --omni-micro-batch=4 \
      -o "$work/elastic.out" --parsable elastic.sh) ||
  { cat "$work/elastic.out" >&2; fail "the elastic job failed"; }
! grep -q "overrides the job's" "$work/elastic.out" || fail "the trainer overrode the job's batch sizes: $(grep overrides "$work/elastic.out" | head -n 1)"
grep -E 'world [0-9]+ -> [0-9]+|launch-exit' "$work/elastic.out" || true
# The ranks share this kernel and run as one user: their hand-offs are same-host copies
# (libomni(3), OMNI_SAME_HOST_COPY), unless Yama forbids a rank to read another's memory.
if [ "$(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo 0)" = 0 ]; then
  ! grep -q 'cannot copy from each other' "$work/elastic.out" ||
    fail "same-host copies were refused: $(grep 'cannot copy' "$work/elastic.out" | head -n 1)"
fi

# The job's sockets at step 10 (4 units): omni-launch's coordinator, the ranks' clients and
# Gloo pairs, each on its own node's address; in netns mode the ranks on the other three
# hosts reach the coordinator, and Gloo connects ranks across hosts.
check_sockets "$work/sockets.txt"
if [ "$CLUSTER_HOSTS" = netns ]; then
  expect_eq "other hosts connected to the coordinator" "$(remote_peers "$work/sockets.txt" omni-launch | wc -l)" 3
  expect_eq "hosts that ranks reach (coordinator and Gloo peers)" "$(remote_peers "$work/sockets.txt" omni-train-demo | wc -l)" 4
fi
/usr/bin/python3 "$top_src/tests/integration/same-steps.py" "$work/static.jsonl" "$work/elastic.jsonl" 60 ||
  fail "static and elastic runs differ (above)"
/usr/bin/python3 - "$work/static.jsonl" "$work/elastic.jsonl" "$work/elastic-events.jsonl" <<'PY' ||
import json, sys
static = [json.loads(l) for l in open(sys.argv[1])]
elastic = [json.loads(l) for l in open(sys.argv[2])]
events = [json.loads(l) for l in open(sys.argv[3])]
assert all(m["world"] == 4 for m in static)
worlds = [m["world"] for m in elastic]
seq = [w for i, w in enumerate(worlds) if i == 0 or worlds[i - 1] != w]
assert seq == [4, 2, 3, 4], seq
got = [(e["reason"], e["old_world"], e["new_world"]) for e in events]
assert got[:4] == [("initial", 0, 4), ("planned", 4, 2), ("planned", 2, 3), ("planned", 3, 4)], got
# The trainer's runtime reported the end of each change's pause (omni-launch(1) pause_source).
assert [e["pause_source"] for e in events[1:4]] == ["ranks"] * 3, events
assert elastic[-1]["loss"] < 0.5 * static[0]["loss"], "the model did not learn"
print("ok: worlds", seq)
PY
  fail "the elastic run's sizes and events (above)"
# Every sample of each epoch exactly once, as sets: 20 steps of 48 samples per epoch of
# D = 960, from the indices every rank recorded (--sample-log).
/usr/bin/python3 "$once" "$work/samples-elastic" 960 20 60 || fail "the elastic run's samples (above)"
# A checkpoint of every step, those of the resize steps written by the new world with its
# joiners, and the last one whole.
"$top_build/ckpt/omni-ckpt" ls "$work/elastic-ckpt" >"$work/elastic-ckpt.txt" 2>&1 ||
  { cat "$work/elastic-ckpt.txt" >&2; fail "omni-ckpt ls of the elastic run failed"; }
expect_eq "complete checkpoints of the elastic run" "$(grep -c '^ *step-[0-9]* *[0-9]* *complete' "$work/elastic-ckpt.txt")" 60
"$top_build/ckpt/omni-ckpt" verify "$work/elastic-ckpt/latest" >/dev/null || fail "the elastic run's last checkpoint does not verify"
# The check can fail: one index of step 3 repeated in step 4 (and so missing once) is found.
mkdir -p "$work/samples-bad"
for f in "$work"/samples-elastic/*.samples; do cp "$f" "$work/samples-bad/"; done
f=$(grep -l '^3 ' "$work"/samples-bad/*.samples | xargs grep -l '^4 ' | head -n 1)
[ -n "$f" ] || fail "no rank recorded both step 3 and step 4 in $work/samples-elastic"
i3=$(awk '$1 == 3 { print $3; exit }' "$f")
awk -v i="$i3" '$1 == 4 && !done { $3 = i; done = 1 } { print }' "$f" >"$f.new" && mv "$f.new" "$f"
rc=0; /usr/bin/python3 "$once" "$work/samples-bad" 960 20 60 >"$work/bad.out" || rc=$?
expect_eq "exactly-once check on a log with a sample used twice" "$rc" 1
grep -q "epoch 0: 1 samples used more than once" "$work/bad.out" || fail "the checker missed the repeat: $(cat "$work/bad.out")"

out=$(timeout 300 sbatch --wait -N4 -t 5 -o "$work/lost.out" --parsable lost.sh) ||
  { cat "$work/lost.out" >&2; fail "the job with a lost rank failed"; }
grep -E 'killing|rewound|lost|launch-exit' "$work/lost.out" || true
/usr/bin/python3 "$top_src/tests/integration/same-steps.py" "$work/static.jsonl" "$work/lost.jsonl" 60 ||
  fail "the run with a lost rank differs from the static run (above)"
/usr/bin/python3 - "$work/lost.jsonl" "$work/lost-events.jsonl" <<'PY' ||
import json, sys
lost = [json.loads(l) for l in open(sys.argv[1])]
events = [json.loads(l) for l in open(sys.argv[2])]
assert lost[0]["world"] == 4 and lost[-1]["world"] == 3, (lost[0], lost[-1])
reasons = [e["reason"] for e in events]
assert "lost" in reasons, reasons
print("ok: a SIGKILLed rank: rewound and finished with 3 units, losses equal the static run's")
PY
  fail "the run with a lost rank (above)"
# After the rewind, the steps redone count, not their lost first run: still each sample once.
/usr/bin/python3 "$once" "$work/samples-lost" 960 20 60 || fail "the lost-rank run's samples (above)"
# The job went on without the killed unit and finished: its status is the trainer's, 0.
expect_eq "omni-launch exit after a recovered loss" "$(sed -n 's/^launch-exit //p' "$work/lost.out")" 0
out=$(timeout 300 sbatch --wait -N4 -t 5 -o "$work/belowmin.out" --parsable belowmin.sh) ||
  { cat "$work/belowmin.out" >&2; fail "the below-min job failed to run"; }
grep -E 'killed|rewound|stopped at|launch-exit' "$work/belowmin.out" || true
[ "$(grep -c '^killed unit' "$work/belowmin.out")" = 2 ] || fail "did not kill two units"
grep -q 'omni-train-demo: stopped at step [0-9]* (below-min): fewer units than the elastic minimum are left; newest checkpoint: step [0-9]* in ' \
  "$work/belowmin.out" || fail "the trainer did not report the below-min stop"
exitcode=$(sed -n 's/^launch-exit //p' "$work/belowmin.out")
# The trainer's own status (3: stopped below the minimum), not the killed ranks' 137.
expect_eq "omni-launch exit below the minimum" "$exitcode" 3
/usr/bin/python3 - "$work/belowmin-events.jsonl" <<'PY' || fail "below-min events: $(cat "$work/belowmin-events.jsonl")"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
got = [(e["reason"], e["old_world"], e["new_world"]) for e in ev]
assert got[0] == ("initial", 0, 4) and got[1] == ("lost", 4, 3), got
assert got[-1][0] == "stop" and got[-1][2] == 0, got
print("ok: below-min events", got)
PY
"$top_build/ckpt/omni-ckpt" verify "$work/belowmin-ckpt/latest" >/dev/null || fail "the newest checkpoint does not verify"
note "ok: elastic 4 -> 2 -> 3 -> 4 and a SIGKILLed rank match the static run bitwise; below the minimum the job stops with status $exitcode"
