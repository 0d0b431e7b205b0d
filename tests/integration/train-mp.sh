#!/usr/bin/env bash
# Model-parallel units end to end on the local cluster (libomni(3), omni-train-demo --mp):
# units of N = 4 ranks on two nodes (2 CPUs each, every node its own host), each unit one
# srun step whose MP groups meet through PMIx: one fence over the unit's step when the unit
# spans nodes, one over the group when it sits on one node (mp_wireup.h says why), or through
# the coordinator on request. Every run's loss, LR and samples are bitwise those of a single
# rank without Slurm (the reference, M = 1):
#  - static: 2 units, M = 2 (DP 4); and 4 units of 2 ranks, each on one node, M = 2 (DP 4);
#  - elastic: M = 2, 2 -> 1 -> 2 units (omni-ctl; the grow starts a new unit's srun step),
#    every sample of every epoch once (exactly-once.py), and at every step every MP group and
#    DP group as libomni(3)'s rule says, with every DP rank of a slice holding the same
#    parameters (mp-layout.py); stopped by SIGTERM at a boundary after step 45 with a
#    checkpoint of one logical tensor per parameter;
#  - resumed from that checkpoint at M = 4 (DP 2): the other MP size loads it and finishes;
#  - M = 2 and M = 4, a rank SIGKILLed at step 25: its whole unit is lost, the other unit's
#    groups rewind to the checkpoint of step 20 and finish alone (M = 2's groups met through
#    the coordinator, OMNI_MP_WIREUP=coordinator; M = 4's through PMIx);
#  - bad layouts refused with errors that name them, nothing lost: --omni-mp=3 with units of
#    4 at submit; a trainer's --mp 2 in an --omni-mp=4 job and omni-launch --unit-size 2 with
#    --omni-mp=4 at start, the checkpoint untouched.
# Without PMIx (omni-launch --mpi=none: OMNI_LAUNCH_MPI=none, or a Slurm without mpi/pmix such
# as Debian unstable's 26.05.5) every step says --mpi=none and every group meets through the
# coordinator instead, with the same bitwise results.
. "$(dirname "$0")/lib.sh"
train_commands
cluster_acquire 4 0 netns
cd "$work"
mpi=$(launch_mpi)
if [ "$mpi" = pmix ]; then
  across="wired up through PMIx across the unit's nodes" on_node='wired up through PMIx on this node'
else
  across='wired up through the coordinator' on_node='wired up through the coordinator'
fi
note "omni-launch starts the steps with --mpi=$mpi: groups expected $across"
# steps_used_mpi OUT: every step omni-launch started in OUT ran srun --mpi=$mpi.
steps_used_mpi() {
  local all ours
  all=$(grep -c ' unit [0-9]*: srun ' "$1" || true)
  ours=$(grep -c " unit [0-9]*: srun --mpi=$mpi " "$1" || true)
  [ "$all" -gt 0 ] && [ "$all" = "$ours" ] || fail "$1: $ours of $all steps ran srun --mpi=$mpi"
}
# B = 48, b = 2: GA = 48 / (2 x DP) is whole for DP = 1, 2, 4. 20 steps per epoch of 960.
schedule="--steps 60 --dataset-size 960 --lr 0.05 --warmup 5"
train="$schedule --global-batch 48 --micro-batch 2"
layout=$top_src/tests/integration/mp-layout.py
# batch WHAT OUT SBATCH-ARGS... SCRIPT: run a batch job to its end, its output in OUT.
batch() {
  local what=$1 out=$2
  shift 2
  timeout 300 sbatch --wait -o "$out" "$@" >/dev/null || { cat "$out" >&2; fail "$what failed"; }
}
once=$top_src/tests/integration/exactly-once.py

"$demo" $train --metrics "$work/static.jsonl" >"$work/reference.out" 2>&1 ||
  { cat "$work/reference.out" >&2; fail "the single-rank reference run failed"; }

# Static: 2 units of 4, M = 2 from sbatch (OMNI_MP), the trainer's --mp from the job.
cat >mp2.sh <<EOS
#!/bin/bash
exec "$launch" --units 2 -- "$demo" $train --metrics "$work/mp2.jsonl" --layout-log "$work/layout-mp2"
EOS
chmod +x mp2.sh
mkdir -p "$work/layout-mp2" "$work/layout-elastic" "$work/layout-mp4" "$work/samples"
batch "static M=2" "$work/mp2.out" -N4 -n8 --omni-unit=4 --omni-mp=2 -t 3 mp2.sh
grep -c "$across" "$work/mp2.out" | grep -qx 8 ||
  fail "not every rank's MP group $across: $(grep -m1 'model-parallel group' "$work/mp2.out")"
steps_used_mpi "$work/mp2.out"
/usr/bin/python3 "$top_src/tests/integration/same-steps.py" "$work/static.jsonl" "$work/mp2.jsonl" 60 ||
  fail "M=2 differs from the single rank (above)"
/usr/bin/python3 "$layout" "$work/layout-mp2" 4 2 60 || fail "the static M=2 run's layout (above)"

# Static, units of 2 on one node each: the groups' fences stay on their node.
cat >mp2-node.sh <<EOS
#!/bin/bash
exec "$launch" --units 4 -- "$demo" $train --metrics "$work/mp2-node.jsonl"
EOS
chmod +x mp2-node.sh
batch "static M=2 in units of 2" "$work/mp2-node.out" -N4 -n8 --omni-unit=2 --omni-mp=2 -t 3 mp2-node.sh
grep -c "$on_node" "$work/mp2-node.out" | grep -qx 8 ||
  fail "not every rank's MP group $on_node: $(grep -m1 'model-parallel group' "$work/mp2-node.out")"
/usr/bin/python3 "$top_src/tests/integration/same-steps.py" "$work/static.jsonl" "$work/mp2-node.jsonl" 60 ||
  fail "M=2 in units of 2 differs from the single rank (above)"

# Elastic, M = 2: 2 -> 1 -> 2 units, then SIGTERM to omni-launch: every rank stops at one
# boundary and the trainer checkpoints there.
elastic_job elastic.sh elastic "--boundary-timeout 30" \
  "$schedule --pace-ms 60 --ckpt $work/ckpt --ckpt-every 10 --sample-log $work/samples --layout-log $work/layout-elastic" <<EOS
at_step 12 && "$ctl" reshape --units 1 || exit 11
at_step 24 && "$ctl" reshape --units 2 || exit 12
at_step 45 && kill -TERM \$pid || exit 13
EOS
batch "elastic M=2" "$work/elastic.out" -N4 -n8 --omni-elastic=1:2 --omni-unit=4 --omni-mp=2 \
  --omni-global-batch=48 --omni-micro-batch=2 -t 3 elastic.sh
# For the log only (the checks follow): the trainer's resize lines and omni-launch's exit,
# without the timestamped info lines; grep exits 1 when none match, which is no failure.
grep -E 'world [0-9]+ -> [0-9]+|launch-exit|stop' "$work/elastic.out" | grep -v '^20' || true
stopped=$(tail -n 1 "$work/elastic.jsonl" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["step"])')
[ "$stopped" -ge 45 ] && [ "$stopped" -lt 60 ] || fail "the elastic run stopped at step $stopped, expected 45..59"
/usr/bin/python3 - "$work/elastic.jsonl" <<'PY' || fail "the elastic run's worlds (above)"
import json, sys
w = [json.loads(l)["world"] for l in open(sys.argv[1])]
seq = [x for i, x in enumerate(w) if i == 0 or w[i - 1] != x]
assert seq == [8, 4, 8], seq
print("ok: worlds", seq)
PY
/usr/bin/python3 "$layout" "$work/layout-elastic" 4 2 "$stopped" || fail "the elastic run's layout (above)"
# The joining unit's groups met through PMIx in its own srun step, off the survivors' pause
# (or through the coordinator, without PMIx).
grep -q "model-parallel group of unit 2 replica 1: rank 1 of 2 ($across)" "$work/elastic.out" ||
  fail "the joining unit's MP group was not $across"
steps_used_mpi "$work/elastic.out"
# The checkpoint: one logical tensor per parameter, whatever wrote it.
"$top_build/ckpt/omni-ckpt" verify "$work/ckpt/latest" >/dev/null || fail "the stop checkpoint does not verify"
"$top_build/ckpt/omni-ckpt" show "$work/ckpt/latest" >"$work/ckpt-show.txt" 2>&1 ||
  { cat "$work/ckpt-show.txt" >&2; fail "omni-ckpt show failed"; }
for t in model/W1 model/b1 model/W2 model/b2 optim/adam_m/W1 optim/adam_v/b2; do
  grep -q "$t" "$work/ckpt-show.txt" || fail "the checkpoint lacks $t: $(cat "$work/ckpt-show.txt")"
done
latest_before=$(readlink "$work/ckpt/latest")

# Bad layouts. At submit: model-parallel groups of 3 in units of 4.
rc=0
sbatch -N1 --omni-unit=4 --omni-mp=3 --wrap true >"$work/bad-submit.out" 2>&1 || rc=$?
[ "$rc" != 0 ] || fail "sbatch accepted --omni-mp=3 with units of 4"
grep -q -- "--omni-mp=3: must divide the unit size 4" "$work/bad-submit.out" ||
  fail "the refusal does not say why: $(cat "$work/bad-submit.out")"
# At start: the job runs M = 4, the trainer says 2; and units of 2 for M = 4.
cat >bad.sh <<EOS
#!/bin/bash
"$launch" --units 2 -- "$demo" $train --mp 2 --ckpt "$work/ckpt" >"$work/bad-mp.out" 2>&1
echo "trainer-mp \$?"
"$launch" --units 2 --unit-size 2 -- "$demo" $train --ckpt "$work/ckpt" >"$work/bad-unit.out" 2>&1
echo "unit-size \$?"
EOS
chmod +x bad.sh
batch "bad layouts" "$work/bad.out" -N4 -n8 --omni-unit=4 --omni-mp=4 -t 2 bad.sh
grep -q "trainer-mp [1-9]" "$work/bad.out" || fail "a trainer --mp 2 in an --omni-mp=4 job did not fail: $(cat "$work/bad.out")"
grep -q -- "--mp 2: the job runs 4 model-parallel ranks per replica (OMNI_MP" "$work/bad-mp.out" ||
  fail "the trainer's refusal does not name --mp and OMNI_MP: $(grep -m3 mp "$work/bad-mp.out")"
grep -q "unit-size 2" "$work/bad.out" || fail "omni-launch --unit-size 2 with OMNI_MP=4 did not exit 2: $(cat "$work/bad.out")"
grep -q "OMNI_MP=4 (sbatch --omni-mp): model-parallel groups of 4 ranks do not divide units of 2" "$work/bad-unit.out" ||
  fail "omni-launch's refusal does not say why: $(cat "$work/bad-unit.out")"
expect_eq "the newest checkpoint after the refused starts" "$(readlink "$work/ckpt/latest")" "$latest_before"

# Resume at M = 4 (one replica per unit, DP 2) from the M = 2 checkpoint: the metrics
# continue in the elastic run's file from its checkpoint on.
cat >mp4.sh <<EOS
#!/bin/bash
exec "$launch" --units 2 -- "$demo" $train --ckpt "$work/ckpt" --metrics "$work/elastic.jsonl" --layout-log "$work/layout-mp4"
EOS
chmod +x mp4.sh
batch "resume at M=4" "$work/mp4.out" -N4 -n8 --omni-unit=4 --omni-mp=4 -t 3 mp4.sh
grep -c "$across" "$work/mp4.out" | grep -qx 8 ||
  fail "the M=4 groups span two nodes and should be $across: $(grep -m1 'model-parallel group' "$work/mp4.out")"
grep -q "resumed at step $stopped from" "$work/mp4.out" || fail "the M=4 run did not resume at step $stopped: $(grep -m2 resumed "$work/mp4.out")"
/usr/bin/python3 "$top_src/tests/integration/same-steps.py" "$work/static.jsonl" "$work/elastic.jsonl" 60 ||
  fail "elastic M=2 then M=4 differ from the single rank (above)"
# mp-layout.py reads steps 1..N: the resumed run's lines are steps after the checkpoint.
/usr/bin/python3 - "$work/layout-mp4" "$stopped" <<'PY' || fail "the M=4 run's layout (above)"
import glob, sys
rows = [l.split() for p in glob.glob(sys.argv[1] + "/*.layout") for l in open(p)]
first = min(int(r[0]) for r in rows)
assert first == int(sys.argv[2]) + 1, first
for step in {int(r[0]) for r in rows}:
    here = [r for r in rows if int(r[0]) == step]
    assert sorted((int(r[4]), int(r[6])) for r in here) == [(m, d) for m in range(4) for d in range(2)], here
    for m in range(4):
        assert len({r[8] for r in here if int(r[4]) == m}) == 1, (step, m)
print("ok: M=4 resumed at step", first, "with 4 slices x DP 2, each slice's DP ranks agreeing")
PY
# Exactly once over the elastic part (M = 2), from MP rank 0 of each replica.
/usr/bin/python3 "$once" "$work/samples" 960 20 "$stopped" || fail "the elastic run's samples (above)"

# A lost rank: the coordinator drops its whole unit; the survivors rewind.
# lost_run M WIREUP LOG: the run with OMNI_MP_WIREUP=WIREUP, whose 8 ranks must log LOG.
lost_run() {
  local m=$1 wireup=$2 wired=$3 name=lost-mp$1
  cat >"$name.sh" <<EOS
#!/bin/bash
export OMNI_COMM_TIMEOUT_MS=5000   # the dead rank's MP peers give up this fast
export OMNI_MP_WIREUP=$wireup
"$launch" --units 2 --boundary-timeout 20 -- "$demo" $train --pace-ms 60 --ckpt "$work/$name-ckpt" --ckpt-every 10 \
  --metrics "$work/$name.jsonl" &
pid=\$!
"$at_step" "$work/$name.jsonl" 25
victim=\$("$rank_pids" 1 | head -n 1)
[ -n "\$victim" ] || { echo "no rank of unit 1 found"; exit 20; }
echo "killing unit 1 rank pid \$victim at step 25 or later"
kill -9 "\$victim"
wait \$pid
echo "launch-exit \$?"
EOS
  chmod +x "$name.sh"
  batch "a lost rank with M=$m" "$work/$name.out" -N4 -n8 --omni-unit=4 --omni-mp="$m" -t 3 "$name.sh"
  grep -c "$wired" "$work/$name.out" | grep -qx 8 ||
    fail "M=$m, OMNI_MP_WIREUP=$wireup: not every group $wired: $(grep -m1 'model-parallel group' "$work/$name.out")"
  grep -q "rewound to step 20 with world 4" "$work/$name.out" ||
    fail "M=$m: the survivors did not rewind to step 20: $(grep -m3 -E 'rewound|lost' "$work/$name.out")"
  expect_eq "omni-launch exit after a recovered loss (M=$m)" "$(sed -n 's/^launch-exit //p' "$work/$name.out")" 0
  /usr/bin/python3 "$top_src/tests/integration/same-steps.py" "$work/static.jsonl" "$work/$name.jsonl" 60 ||
    fail "the M=$m run with a lost rank differs from the single rank (above)"
}
lost_run 2 coordinator 'wired up through the coordinator'
lost_run 4 auto "$across"

# The layout check can fail: one rank's fingerprint changed at step 13.
mkdir -p "$work/layout-bad"
cp "$work"/layout-elastic/*.layout "$work/layout-bad/"
f=$(grep -l '^13 ' "$work"/layout-bad/*.layout | head -n 1)
awk '$1 == 13 { $9 = "1" } { print }' "$f" >"$f.new" && mv "$f.new" "$f"
rc=0; /usr/bin/python3 "$layout" "$work/layout-bad" 4 2 "$stopped" >"$work/layout-bad.out" || rc=$?
expect_eq "layout check on a log with one rank's parameters changed" "$rc" 1
grep -q "step 13: the DP ranks of MP index" "$work/layout-bad.out" || fail "the checker missed it: $(cat "$work/layout-bad.out")"
note "ok (--mpi=$mpi): M=2 static, M=2 elastic 2 -> 1 -> 2, a resume at M=4, M=2 and M=4 after a lost rank train bitwise as one rank; groups per the rule; bad layouts refused"
