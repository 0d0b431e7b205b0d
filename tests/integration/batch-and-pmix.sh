#!/usr/bin/env bash
# A batch job across 2 nodes, and a PMIx program whose 4 ranks on 2 nodes exchange values
# with Put/Fence/Get under `srun --mpi=pmix`. On a Slurm without mpi/pmix (Debian unstable's
# 26.05.5) the batch part runs and the PMIx part skips with that reason: no way around it, the
# part checks Slurm's PMIx server itself; what the ranks do without it (srun --mpi=none) is
# checked by runtime-pmix.sh and launch-no-pmix.sh there.
. "$(dirname "$0")/lib.sh"
cluster_acquire 2 0
pmix_check=$top_build/tests/pmix_check
[ -x "$pmix_check" ] || fail "$pmix_check is not built (make -C tests pmix_check)"

cd "$work"
cat >job.sh <<'EOS'
#!/bin/bash
srun -N2 -n2 printenv SLURMD_NODENAME
EOS
out=$(sbatch --wait -N2 -o "$work/batch.out" --parsable job.sh) || fail "sbatch --wait failed (job $out)"
jobid=${out%%;*}
expect_eq "nodes the batch job's step ran on" "$(sort "$work/batch.out" | tr '\n' ' ')" "n1 n2 "
expect_eq "batch job $jobid state" "$(job_state "$jobid")" COMPLETED

slurm_has_pmix || skip "the batch part passed (job $jobid on n1,n2); the PMIx part cannot run: $(no_pmix_reason)"
srun --mpi=pmix -N2 -n4 "$pmix_check" >"$work/pmix.out" 2>"$work/pmix.err" ||
  { cat "$work/pmix.err" >&2; fail "srun --mpi=pmix -N2 -n4 pmix_check failed"; }
cat "$work/pmix.out"
expect_eq "ranks reporting correct peer values" \
  "$(grep -c 'all peer values correct' "$work/pmix.out")" 4
expect_eq "ranks seen" "$(sed -n 's/^pmix_check: rank \([0-9]*\) of 4 .*/\1/p' "$work/pmix.out" | sort -n | tr '\n' ' ')" "0 1 2 3 "
expect_eq "nodes used by the PMIx step" \
  "$(sed -n 's/.*(\(n[0-9]*\)).*/\1/p' "$work/pmix.out" | sort -u | wc -l)" 2

# The program really needs PMIx: without the plugin it must fail, so the check above means
# something.
if srun --mpi=none -N1 -n1 "$pmix_check" >/dev/null 2>&1; then
  fail "pmix_check succeeded without PMIx (--mpi=none); it cannot be trusted"
fi
note "ok: batch job $jobid on n1,n2; PMIx Put/Fence/Get across 4 ranks on 2 nodes"
