#!/usr/bin/env bash
# omni-launch --mpi none on the local cluster: the path for a Slurm without mpi/pmix (Debian
# unstable's 26.05.5) and sites that run none, taken here on purpose whatever this Slurm has.
# Units of 4 ranks on two nodes, model-parallel M = 2, resized 2 -> 1 -> 2 with omni-ctl (the
# grow starts a new unit's step, also --mpi=none): every step says srun --mpi=none, every MP
# group (the joining unit's too) meets through the coordinator, and loss, LR and samples are
# bitwise those of one rank without Slurm, every sample once per epoch. And --mpi auto picks
# what `srun --mpi=list` offers here (pmix on 22.05 and 24.11, none on 26.05.5).
# It fails if omni-launch ignored --mpi none: the steps would say --mpi=pmix and, under PMIx,
# the units' groups would meet "through PMIx across the unit's nodes".
. "$(dirname "$0")/lib.sh"
train_commands
cluster_acquire 4 0 netns
cd "$work"
# B = 48, b = 2: GA = 48 / (2 x DP) is whole for DP = 2 and 4. 20 steps per epoch of 960.
schedule="--steps 40 --dataset-size 960 --lr 0.05 --warmup 5"
"$demo" $schedule --global-batch 48 --micro-batch 2 --metrics "$work/static.jsonl" >"$work/reference.out" 2>&1 ||
  { cat "$work/reference.out" >&2; fail "the single-rank reference run failed"; }

mkdir -p "$work/samples"
elastic_job elastic.sh elastic "--mpi none --boundary-timeout 30" \
  "$schedule --pace-ms 60 --ckpt $work/ckpt --ckpt-every 1 --sample-log $work/samples" <<EOS
at_step 10 && "$ctl" reshape --units 1 || exit 11
at_step 20 && "$ctl" reshape --units 2 || exit 12
EOS
timeout 300 sbatch --wait -o "$work/elastic.out" -N4 -n8 --omni-elastic=1:2 --omni-unit=4 --omni-mp=2 \
  --omni-global-batch=48 --omni-micro-batch=2 -t 3 elastic.sh >/dev/null ||
  { cat "$work/elastic.out" >&2; fail "the elastic job with --mpi none failed"; }
steps=$(grep -c ' unit [0-9]*: srun ' "$work/elastic.out" || true)
none=$(grep -c ' unit [0-9]*: srun --mpi=none ' "$work/elastic.out" || true)
[ "$steps" = 3 ] && [ "$none" = 3 ] ||
  fail "expected 3 steps (2 initial units, 1 joining), all srun --mpi=none: $none of $steps: $(grep -m3 ': srun ' "$work/elastic.out")"
grep -c 'wired up through the coordinator' "$work/elastic.out" | grep -qx 12 ||
  fail "not all 12 ranks' MP groups (8 initial, 4 joining) met through the coordinator: $(grep -m2 'model-parallel group' "$work/elastic.out")"
expect_eq "omni-launch exit" "$(sed -n 's/^launch-exit //p' "$work/elastic.out")" 0
planned_worlds elastic 8 4 8
/usr/bin/python3 "$top_src/tests/integration/same-steps.py" "$work/static.jsonl" "$work/elastic.jsonl" 40 ||
  fail "the --mpi none run differs from the single rank (above)"
/usr/bin/python3 "$top_src/tests/integration/exactly-once.py" "$work/samples" 960 20 40 ||
  fail "the --mpi none run's samples (above)"

# auto: what srun --mpi=list says here (lib.sh's launch_mpi reads it on its own).
want=$(unset OMNI_LAUNCH_MPI; launch_mpi)
env -u OMNI_LAUNCH_MPI "$launch" --units 1 --dry-run -- true >"$work/auto.out" 2>&1 ||
  { cat "$work/auto.out" >&2; fail "omni-launch --dry-run with --mpi auto failed"; }
grep -q "^  srun --mpi=$want " "$work/auto.out" ||
  fail "--mpi auto did not pick $want (srun --mpi=list): $(grep -m1 'srun ' "$work/auto.out")"
note "ok: --mpi none: 3 steps without PMIx, 12 groups through the coordinator, 8 -> 4 -> 8 bitwise as one rank; --mpi auto picks $want here"
