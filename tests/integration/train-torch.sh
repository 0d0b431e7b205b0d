#!/usr/bin/env bash
# A PyTorch loop made elastic by omni.torch, on the local cluster (four hosts): the example
# python/examples/train_torch.py (a small multimodal model on the paper workload) in exact
# mode, under omni-launch with Debian's python3 and the build tree's omni package.
#  1. static: 4 units of one rank on 4 nodes, 60 steps, a checkpoint every 20;
#  2. elastic: the same job, shrunk by `scontrol update NumNodes=2` at step 6 (graceful with
#     job_submit/omni: units leave at a boundary; `omni-ctl shrink --units 2` where
#     job_submit/omni is not built) and grown back by `omni-ctl grow --units 4`
#     once it has 2 units (a satellite job on the freed nodes, whose ranks receive parameters,
#     optimizer and scheduler state from the survivors): per-step loss, LR and the step's
#     samples bitwise the static run's, every sample once per epoch (as sets), worlds
#     4 -> 2 -> 4;
#  3. a rank killed with SIGKILL at step 14: only it is lost (the others leave their failed
#     collectives at once, well before the boundary timeout), the survivors rewind to the
#     checkpoint of step 10 and finish at DP 3 bitwise equal to the static run;
#  4. the static run's checkpoint of step 20 (written at DP 4) resumes at DP 2, and at DP 3
#     once omni-ckpt reshard has rewritten it for 3 writers, steps 21..60 bitwise the static
#     run's;
#  5. the model the static run saved with torch.save equals what omni.torch.load_state_dict
#     reads from its last checkpoint, in a plain Python process;
#  6. preempted at step 15 (PreemptMode=REQUEUE): every rank stops at one boundary with a
#     checkpoint there, and the requeued job resumes from it, each step once, bitwise;
#  7. float mode through the same resizes, a checkpoint after every step: each step within
#     the bound derived from the order of float sums of the static computation from the
#     state before it (python/test/float_replay.py).
# Without the hand-off (joiners keeping their own initial parameters) part 2 fails at the
# first step after the grow; without exact mode the losses differ from the first resize.
. "$(dirname "$0")/lib.sh"
train_commands
py=/usr/bin/python3
example=$top_src/python/examples/train_torch.py
pkg=$top_build/python/pkg
[ -f "$pkg/omni/_omni.so" ] || skip "the Python module is not built (configure found no Python headers or pybind11)"
"$py" -c 'import torch' 2>/dev/null || skip "Debian's python3-torch is not installed (scripts/install-deps installs it)"
# Part 2's shrink: plain scontrol where job_submit/omni makes it graceful; where it is not
# built (Debian unstable's 26.05.5: no source tree of that release) omni-ctl shrink, the same
# graceful shrink at a boundary without the plugin (scontrol-shrink.sh checks scontrol's).
shrink="scontrol update JobId=\$SLURM_JOB_ID NumNodes=2"
if [ ! -f "$top_build/job_submit/.libs/job_submit_omni.so" ]; then
  shrink="\"$ctl\" shrink --units 2 --wait 120"
  note "job_submit/omni is not built (configure: $(sed -n 's|^  job_submit/omni built *||p' "$top_build/config.log" 2>/dev/null | tail -n 1)): part 2 shrinks with omni-ctl shrink, not scontrol"
fi
cluster_acquire 4 0 netns
cd "$work"
export PYTHONPATH=$pkg LD_LIBRARY_PATH=$top_build/launcher/.libs:$top_build/ckpt/.libs
# 20 steps per epoch (480 / 24); B = 24 with b = 2 allows DP 1, 2, 3, 4 (GA 12, 6, 4, 3).
train="--exact --steps 60 --dataset-size 480 --global-batch 24 --micro-batch 2 --warmup 5"
run_torch() {  # run_torch NAME SBATCH-OPTIONS -- LAUNCH-OPTIONS -- TRAIN-OPTIONS (an sbatch --wait)
  local name=$1
  shift
  local sb=() la=()
  while [ "$1" != -- ]; do sb+=("$1"); shift; done
  shift
  while [ "$1" != -- ]; do la+=("$1"); shift; done
  shift
  printf '#!/bin/bash\nexec %q %s -- %q %q %s\n' "$launch" "${la[*]}" "$py" "$example" "$*" >"$name.sh"
  chmod +x "$name.sh"
  timeout 300 sbatch --wait "${sb[@]}" -t 5 -o "$work/$name.out" "$name.sh" >/dev/null ||
    { tail -30 "$work/$name.out" >&2; fail "the $name job failed"; }
}
# compare REFERENCE RUN FIRST LAST: steps FIRST..LAST of RUN are REFERENCE's, bitwise.
compare() {
  "$py" - "$@" <<'PY' || fail "$2 differs from $1 (above)"
import json, sys
ref = {m["step"]: m for m in map(json.loads, open(sys.argv[1]))}
run = [json.loads(l) for l in open(sys.argv[2])]
first, last = int(sys.argv[3]), int(sys.argv[4])
assert [m["step"] for m in run] == list(range(first, last + 1)), [m["step"] for m in run]
for m in run:
    r = ref[m["step"]]
    for k in ("loss", "lr", "step_samples"):
        assert m[k] == r[k], (m["step"], k, m[k], r[k])
print("ok: steps %d..%d bitwise, worlds %s" % (first, last, sorted({m["world"] for m in run})))
PY
}

# worlds METRICS: the world sizes the run trained at, as they changed.
worlds() {
  "$py" -c 'import json, sys
w = [json.loads(l)["world"] for l in open(sys.argv[1])]
print(" ".join(str(x) for i, x in enumerate(w) if i == 0 or w[i - 1] != x))' "$1"
}

# 1. The static reference.
run_torch static -N4 --ntasks-per-node=1 -- --units 4 -- $train --metrics "$work/static.jsonl" \
  --ckpt "$work/static-ckpt" --ckpt-every 20 --save-model "$work/static-model.pt"
expect_eq "static steps" "$(grep -c '"step"' static.jsonl)" 60

# 2. Shrunk by scontrol, grown by omni-ctl.
mkdir -p samples
# elastic_script NAME METRICS TRAIN-OPTIONS...: NAME.sh, a job of 4 units that
# $shrink (scontrol update NumNodes=2, above) at step 6 and `omni-ctl grow --units 4` grows back.
elastic_script() {
  local name=$1 metrics=$2
  shift 2
  cat >"$name.sh" <<EOS
#!/bin/bash
set -u
export PYTHONPATH=$PYTHONPATH LD_LIBRARY_PATH=$LD_LIBRARY_PATH OMP_NUM_THREADS=1
"$launch" --events "$work/$name-events.jsonl" -- "$py" "$example" $* --metrics "$metrics" &
pid=\$!
units_are() {
  for _ in \$(seq 300); do
    "$ctl" status --json 2>/dev/null | grep -q "^  \"units\": \$1,\$" && return 0
    sleep 0.1
  done
  echo "never had \$1 units"; return 1
}
"$at_step" "$metrics" 6 120 || exit 11
$shrink || exit 12
units_are 2 || exit 13
"$ctl" grow --units 4 --wait 120 || exit 15
units_are 4 || exit 16
wait \$pid
rc=\$?
echo "launch-exit \$rc"
exit \$rc
EOS
  chmod +x "$name.sh"
}
elastic_script elastic "$work/elastic.jsonl" $train --pace-ms 250 --sample-log "$work/samples"
job=$(timeout 400 sbatch --wait --parsable -N4 --ntasks-per-node=1 --omni-elastic=1:4 -t 6 -o "$work/elastic.out" elastic.sh) ||
  { tail -40 "$work/elastic.out" >&2; fail "the elastic job failed"; }
grep -E 'world [0-9]+ -> [0-9]+|launch-exit' elastic.out || true  # for the reader; the checks follow
expect_eq "job ${job%%;*} state" "$(job_state "${job%%;*}")" COMPLETED
"$py" "$top_src/tests/integration/same-steps.py" static.jsonl elastic.jsonl 60 || fail "the elastic run differs from the static one"
"$py" "$top_src/tests/integration/exactly-once.py" samples 480 20 60 || fail "samples of the elastic run (above)"
expect_eq "worlds" "$(worlds elastic.jsonl)" "4 2 4"

# 3. A rank killed: rewind to the checkpoint of step 10, then bitwise the static run.
cat >lost.sh <<EOS
#!/bin/bash
set -u
export PYTHONPATH=$PYTHONPATH LD_LIBRARY_PATH=$LD_LIBRARY_PATH
"$launch" --boundary-timeout 20 -- "$py" "$example" $train --pace-ms 100 --ckpt "$work/lost-ckpt" --ckpt-every 10 \
  --metrics "$work/lost-all.jsonl" &
pid=\$!
"$at_step" "$work/lost-all.jsonl" 14 120 || exit 11
victim=\$("$rank_pids" 3 train_torch.py | head -n1)
[ -n "\$victim" ] || { echo "no rank of unit 3"; exit 12; }
kill -9 "\$victim"
wait \$pid
rc=\$?
echo "launch-exit \$rc"
exit \$rc
EOS
chmod +x lost.sh
timeout 400 sbatch --wait -N4 --ntasks-per-node=1 --omni-elastic=1:4 -t 6 -o "$work/lost.out" lost.sh >/dev/null ||
  { tail -40 "$work/lost.out" >&2; fail "the job that lost a rank failed"; }
grep -q "(lost" lost.out || fail "omni-launch saw no lost rank"
# The metrics hold steps 11..14 twice: keep each step's last line (the retrained one).
"$py" -c 'import json,sys
last = {}
for l in open(sys.argv[1]): last[json.loads(l)["step"]] = l
open(sys.argv[2], "w").writelines(last[s] for s in sorted(last))
seen = [json.loads(l)["step"] for l in open(sys.argv[1])]
assert seen.count(11) == 2, seen' lost-all.jsonl lost.jsonl || fail "the run did not rewind to step 10"
"$py" "$top_src/tests/integration/same-steps.py" static.jsonl lost.jsonl 60 || fail "the rewound run differs from the static one"
# Only the killed rank is lost: the others leave their failed collectives at once (omni.torch
# closes the group), so none of them misses the boundary and is declared lost by its timeout.
expect_eq "worlds after the loss" "$(worlds lost.jsonl)" "4 3"

# 4. The checkpoint of step 20, written at DP 4, resumed at DP 2 and DP 3.
#    DP 3 reads it as omni-ckpt reshard rewrote it for 3 writers.
mkdir -p resume2 resume3
cp -a "$(readlink -f static-ckpt/step-0000000020)" resume2/
"$top_build/ckpt/omni-ckpt" reshard static-ckpt/step-0000000020 --dp 3 -o resume3/step-0000000020 >/dev/null ||
  fail "omni-ckpt reshard of the torch checkpoint failed"
"$top_build/ckpt/omni-ckpt" verify resume3/step-0000000020 >/dev/null || fail "the resharded checkpoint does not verify"
for d in 2 3; do
  ln -s step-0000000020 "resume$d/latest"
  run_torch "resume$d" -N$d --ntasks-per-node=1 -- --units $d -- $train --ckpt "$work/resume$d" \
    --metrics "$work/resume$d.jsonl"
  compare static.jsonl "resume$d.jsonl" 21 60
done

# 6. Preempted (the partition scavenger, PreemptMode=REQUEUE) at step 15 and requeued: the
#    ranks take the SIGTERM at the next boundary, every one stops there with a checkpoint of
#    that step, and the second run resumes from it; together the static run, each step once.
cat >pre.sh <<EOS
#!/bin/bash
set -u
export PYTHONPATH=$PYTHONPATH LD_LIBRARY_PATH=$LD_LIBRARY_PATH
echo "run \${SLURM_RESTART_COUNT:-0}"
"$launch" -- "$py" "$example" $train --pace-ms 150 --ckpt "$work/pre-ckpt" --ckpt-every 10 --metrics "$work/pre.jsonl" &
pid=\$!
if [ "\${SLURM_RESTART_COUNT:-0}" = 0 ]; then
  "$at_step" "$work/pre.jsonl" 15 120 || exit 11
  sbatch --parsable -p omni -w "\$SLURM_JOB_NODELIST" -N4 --exclusive -t 2 -o /dev/null --wrap 'sleep 3'
fi
wait \$pid
rc=\$?
echo "launch-exit \$rc"
exit \$rc
EOS
chmod +x pre.sh
job=$(sbatch_until_end 400 -p scavenger --requeue --open-mode=append -N4 --ntasks-per-node=1 \
  --exclusive -t 6 -o "$work/pre.out" pre.sh) || { tail -40 "$work/pre.out" >&2; fail "the preempted job failed"; }
job=${job%%;*}
expect_eq "runs of the batch script" "$(grep -c '^run ' pre.out)" 2
expect_eq "job $job state" "$(job_state "$job")" COMPLETED
grep -q 'SIGTERM to rank' pre.out || fail "the ranks did not stop for the SIGTERM"
"$py" "$top_src/tests/integration/same-steps.py" static.jsonl pre.jsonl 60 || fail "the preempted run differs from the static one"

# 7. Float mode (no --exact), the same resizes, a checkpoint after every step: each step is
#    the static computation from the state before it, within the bound derived from the
#    order of float sums (python/test/float_replay.py, omni-python(3) FLOAT MODE).
float="--steps 40 --dataset-size 480 --global-batch 24 --micro-batch 2 --warmup 5"
elastic_script float "$work/float.jsonl" $float --pace-ms 200 --ckpt "$work/float-ckpt" --ckpt-every 1
timeout 400 sbatch --wait -N4 --ntasks-per-node=1 --omni-elastic=1:4 -t 6 -o "$work/float.out" float.sh >/dev/null ||
  { tail -40 "$work/float.out" >&2; fail "the float job failed"; }
expect_eq "float worlds" "$(worlds float.jsonl)" "4 2 4"
"$py" "$top_src/python/test/float_replay.py" --trainer "$example" --ckpt "$work/float-ckpt" \
  --metrics "$work/float.jsonl" -- $float || fail "the float run left the derived bound (above)"

# 5. The static run's model, read back in a plain process.
"$py" - "$work/static-model.pt" "$work/static-ckpt" <<'PY' || fail "load_state_dict differs from the saved model"
import sys, torch
import omni.torch as ot
saved, loaded = torch.load(sys.argv[1]), ot.load_state_dict(sys.argv[2])
assert sorted(saved) == sorted(loaded), (sorted(saved), sorted(loaded))
for k in saved:
    assert torch.equal(saved[k], loaded[k]), k
print("ok: load_state_dict gives the model's %d tensors bitwise" % len(saved))
PY
note "ok: PyTorch exact mode: 4 -> 2 -> 4, a lost rank, preemption and DP 4 -> 2, 3 resumes bitwise the static run; float mode within its derived bound"
