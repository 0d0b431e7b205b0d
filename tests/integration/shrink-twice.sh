#!/usr/bin/env bash
# A running 3-node job shrinks itself twice with `scontrol update NodeList=`: 3 -> 2 -> 1.
# Both resizes must succeed (the second needs accounting, which omni-cluster provides), and
# each later step must run exactly on the nodes that are left.
. "$(dirname "$0")/lib.sh"
cluster_acquire 3 0
cd "$work"
cat >job.sh <<'EOS'
#!/bin/bash
set -e
nodes=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))
echo "gen0 $SLURM_JOB_NUM_NODES $(srun -N3 printenv SLURMD_NODENAME | sort | tr '\n' ,)"
scontrol update JobId="$SLURM_JOB_ID" NodeList="${nodes[0]},${nodes[1]}"
. "./slurm_job_${SLURM_JOB_ID}_resize.sh"
echo "gen1 $SLURM_JOB_NUM_NODES $(srun printenv SLURMD_NODENAME | sort | tr '\n' ,)"
scontrol update JobId="$SLURM_JOB_ID" NodeList="${nodes[0]}"
. "./slurm_job_${SLURM_JOB_ID}_resize.sh"
echo "gen2 $SLURM_JOB_NUM_NODES $(srun printenv SLURMD_NODENAME | sort | tr '\n' ,)"
EOS
out=$(sbatch --wait -N3 -o "$work/job.out" --parsable job.sh) ||
  { cat "$work/job.out" >&2; fail "the resizing job failed"; }
jobid=${out%%;*}
grep '^gen' "$work/job.out"
first=$(sed -n 's/^gen0 3 \([^,]*\),.*/\1/p' "$work/job.out")
[ -n "$first" ] || fail "no 3-node step before the resizes: $(cat "$work/job.out")"
n=($(grep '^gen0' "$work/job.out" | cut -d' ' -f3 | tr , ' '))
expect_eq "step before resizing" "$(grep '^gen0' "$work/job.out")" "gen0 3 ${n[0]},${n[1]},${n[2]},"
expect_eq "step after the first shrink" "$(grep '^gen1' "$work/job.out")" "gen1 2 ${n[0]},${n[1]},"
expect_eq "step after the second shrink" "$(grep '^gen2' "$work/job.out")" "gen2 1 ${n[0]},"
expect_eq "job $jobid final node count" "$(sacct -n -X -P -j "$jobid" -o NNodes | tail -n 1)" 1
expect_eq "job $jobid state" "$(job_state "$jobid")" COMPLETED
note "ok: job $jobid shrank 3 -> 2 -> 1 nodes"
