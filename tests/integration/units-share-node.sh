#!/usr/bin/env bash
# Several units on one node, on the local cluster (two nodes of 2 fake GPUs): omni-train-demo
# under omni-launch with 4 units of 1 rank in a job of --ntasks-per-node=2 --gres=gpu:2, so
# two units share each node. On Slurm 22.05 a step that asks for nothing gets every CPU and
# GPU the job holds on its node and the next unit's step waits ("Requested nodes are busy");
# omni-launch gives each unit's step its share (--exact --cpus-per-task --gres). Reshaped
# 4 -> 2 -> 4 inside the allocation at steps 6 and 14, so the joiners land beside running
# units. Checked:
#  - the job forms with 4 ranks, and after the grow back has 4 again, each rank on its own
#    (node, GPU): the two ranks of a node see different CUDA_VISIBLE_DEVICES;
#  - omni-launch logged the share it asked for;
#  - per-step loss, LR and samples bitwise those of a static run of 4 units in the same
#    layout, every sample once per epoch, no step trained twice.
. "$(dirname "$0")/lib.sh"
train_commands
cluster_acquire 2 2
cd "$work"
# 12 steps per epoch (384 / 32), 2 epochs; B = 32 with b = 4 allows d = 1, 2, 4.
train="--steps 24 --dataset-size 384 --lr 0.05 --warmup 5 --global-batch 32 --micro-batch 4"
layout=(-N2 --ntasks-per-node=2 --gres=gpu:2 -t 5)

# The job's ranks: 'NODE GPU UNIT' a line.
cat >ranks <<EOS
#!/bin/bash
for u in \$(seq 0 7); do
  for p in \$("$rank_pids" \$u); do
    tr '\0' '\n' </proc/\$p/environ | sed -n 's/^\(SLURMD_NODENAME\|CUDA_VISIBLE_DEVICES\|OMNI_UNIT_ID\)=//p' | tr '\n' ' '
    echo
  done
done
EOS
chmod +x ranks
write_static_job static.sh 4 "$train"
mkdir -p "$work/samples"
elastic_job share.sh share "--units 4" "$train --pace-ms 200 --sample-log $work/samples" <<EOS
at_step 3 || exit 11
"$work/ranks" >"$work/ranks-4.txt"
at_step 6 || exit 12
"$ctl" reshape --units 2 >/dev/null || exit 13
units_are 2 || exit 14
at_step 14 || exit 15
"$ctl" reshape --units 4 >/dev/null || exit 16
units_are 4 || exit 17
at_step 18 || exit 18
"$work/ranks" >"$work/ranks-back.txt"
EOS
timeout 240 sbatch --wait "${layout[@]}" -o "$work/static.out" static.sh >/dev/null ||
  { cat "$work/static.out" >&2; fail "the static job failed"; }
job=$(timeout 240 sbatch --wait --parsable "${layout[@]}" --omni-elastic=1:4 -o "$work/share.out" share.sh) ||
  { cat "$work/share.out" >&2; fail "the job with units sharing nodes failed"; }
job=${job%%;*}
grep -E 'share each node|world [0-9]+ -> [0-9]+|launch-exit' "$work/share.out" || true  # the log, for the reader
expect_eq "omni-launch exit" "$(sed -n 's/^launch-exit //p' "$work/share.out")" 0
grep -qF -- "2 units share each node: every unit's step asks for its share, --exact --cpus-per-task=" "$work/share.out" ||
  fail "omni-launch did not size the unit steps"
grep -qF -- "--gres=gpu:1" "$work/share.out" || fail "the unit steps did not ask for one GPU each"
for f in ranks-4 ranks-back; do
  cat "$work/$f.txt"
  expect_eq "ranks in $f" "$(grep -c . "$work/$f.txt")" 4
  expect_eq "distinct (node, GPU) pairs in $f" "$(awk '{ print $1, $2 }' "$work/$f.txt" | sort -u | grep -c .)" 4
done
same_training share 24 384 12
note "ok: 2 units a node, each step with its own GPU and CPUs, 4 -> 2 -> 4, bitwise the static run"
