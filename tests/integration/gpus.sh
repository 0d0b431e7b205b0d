#!/usr/bin/env bash
# Fake GPUs behave like real ones for Slurm's gres: CUDA_VISIBLE_DEVICES is set per step.
. "$(dirname "$0")/lib.sh"
cluster_acquire 4 2
expect_eq "CUDA_VISIBLE_DEVICES with --gres=gpu:2 on 4 nodes" \
  "$(srun -N4 --gres=gpu:2 printenv CUDA_VISIBLE_DEVICES | tr '\n' ' ')" "0,1 0,1 0,1 0,1 "
one=$(srun -N1 --gres=gpu:1 printenv CUDA_VISIBLE_DEVICES)
case "$one" in 0|1) ;; *) fail "--gres=gpu:1 gave CUDA_VISIBLE_DEVICES='$one', expected 0 or 1" ;; esac
# Slurm must refuse more GPUs than a node has, or the fake devices are not being counted.
if srun -N1 --gres=gpu:3 true 2>"$work/err"; then
  fail "--gres=gpu:3 on a 2-GPU node was accepted"
fi
grep -qi 'Requested node configuration is not available' "$work/err" ||
  fail "unexpected error for --gres=gpu:3: $(cat "$work/err")"
note "ok: gres GPUs on fake devices"
