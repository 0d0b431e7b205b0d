#!/usr/bin/env bash
# libomni's rank runtime under `srun --mpi=pmix`: 4 ranks on 2 nodes learn rank, world and
# unit from PMIx (no OMNI_UNIT_ID set: unit = PMIx rank), find the coordinator through
# OMNI_JOB_DIR, form generation 1, and go through a planned 4 -> 2 reshape: units 2 and 3
# LEFT, units 0 and 1 RESHAPED with their optimizer shard re-partitioned and GA 12/(1*2) = 6,
# then STOP. Every rank checks its allreduce and its shard itself (launcher/runtime/test/runtime_probe).
# On a Slurm without mpi/pmix (Debian unstable's 26.05.5; or OMNI_LAUNCH_MPI=none anywhere) the
# step runs `srun --mpi=none`, the route omni-launch takes there: the ranks learn rank and unit
# from SLURM_PROCID, none initialises PMIx, and the same reshape must come out. It fails if the
# runtime's SLURM_PROCID fallback is removed (every rank would be unit 0: "units seen").
. "$(dirname "$0")/lib.sh"
cluster_acquire 2 0
probe=$top_build/launcher/runtime/test/runtime_probe
serve=$top_build/launcher/runtime/test/runtime_coord_serve
need_built "$probe" "$serve"

cd "$work"
"$serve" "$work/job" 4 2 60 >"$work/coord.out" 2>"$work/coord.err" &
serve_pid=$!
for _ in $(seq 100); do [ -s "$work/coord.out" ] && break; sleep 0.05; done
[ -s "$work/coord.out" ] || fail "the coordinator did not start: $(cat "$work/coord.err")"

mpi=$(launch_mpi)
[ "$mpi" = pmix ] || note "srun --mpi=none: $( [ -n "${OMNI_LAUNCH_MPI:-}" ] && echo "OMNI_LAUNCH_MPI=$OMNI_LAUNCH_MPI" || no_pmix_reason)"
OMNI_JOB_DIR=$work/job OMNI_JOIN_TIMEOUT_MS=30000 \
  srun --mpi="$mpi" -N2 -n4 "$probe" >"$work/probe.out" 2>"$work/probe.err" ||
  { cat "$work/probe.out" "$work/probe.err" >&2; kill "$serve_pid" 2>/dev/null; fail "srun --mpi=$mpi -N2 -n4 runtime_probe failed"; }
wait "$serve_pid" || { cat "$work/coord.err" >&2; fail "the coordinator did not see the job stop"; }
cat "$work/probe.out"

expect_eq "ranks that initialised PMIx" \
  "$(sed -n 's/.* libomni\[[0-9]*\] info: PMIx: rank \([0-9]*\) of 4 in namespace .*/\1/p' "$work/probe.err" | sort | tr '\n' ' ')" \
  "$( [ "$mpi" = pmix ] && echo "0 1 2 3 " )"
expect_eq "units seen (from the step's ranks: PMIx's, else SLURM_PROCID)" \
  "$(sed -n 's/^probe: unit \([0-9]*\) slot 0 rank \([0-9]*\) of 4 backend gloo$/\1=\2/p' "$work/probe.out" | sort | tr '\n' ' ')" \
  "0=0 1=1 2=2 3=3 "
# The ranks do not pace their steps, so the reshape lands at whichever boundary follows the
# coordinator's request: the step is read from the output, and all four must agree on it.
step=$(sed -n 's/^probe: unit [0-9]* step \([0-9]*\) \(left\|reshaped\) .*/\1/p' "$work/probe.out" | sort -u | tr '\n' ' ')
[[ $step =~ ^[0-9]+\ $ ]] || fail "the reshape was not seen at one step by every rank: steps '$step'"
step=${step% }
expect_eq "units that left at step $step" \
  "$(sed -n "s/^probe: unit \([0-9]*\) step $step left world 4 .*/\1/p" "$work/probe.out" | sort | tr '\n' ' ')" "2 3 "
expect_eq "reshaped survivors (unit=rank, GA 6, shard re-partitioned)" \
  "$(sed -n "s/^probe: unit \([0-9]*\) step $step reshaped world 2 rank \([0-9]*\) ga 6 shard ok\$/\1=\2/p" "$work/probe.out" | sort | tr '\n' ' ')" \
  "0=0 1=1 "
expect_eq "survivors stopped" \
  "$(grep -c '^probe: unit [01] step [0-9]* stop world 2 ' "$work/probe.out")" 2
# grep -c prints 0 and exits 1 when nothing matches; the count is what is checked.
expect_eq "failures reported by ranks" "$(grep -c FAIL "$work/probe.out" || true)" 0
expect_eq "coordinator generations" "$(sed -n 2,4p "$work/coord.out" | tr '\n' ';')" \
  "generation 1 world 4;generation 2 world 2;stopped at generation 2;"
note "ok: 4 ranks on 2 nodes (srun --mpi=$mpi), planned reshape 4 -> 2 with shard hand-off, then STOP"
