#!/usr/bin/env bash
# An elastic job on fewer nodes than its maximum starts the units its nodes run at once, on
# the local cluster (four hosts of 2 CPUs and 2 fake GPUs each). Ordinary submissions: a node
# count and an elastic range 1:4 (1:2 for units of 2 GPUs), with or without --ntasks-per-node,
# --exclusive, --omni-unit=2 and --gres=gpu:2. Before the fix, omni-launch started MAX units
# on 2 nodes, two steps waited "Requested nodes are busy" and the job formed only at the
# formation timeout. For each job, checked:
#  - the units and world it starts with are those worked out by hand below from what it asked
#    for and holds (omni-launch(1), STARTING UNITS), and it forms ("formed", not at the
#    timeout, here 40 s) within 20 s of omni-launch's start;
#  - no srun of the job printed "Requested nodes are busy", and no srun of the job is left
#    once the job has ended;
#  - omni-launch --dry-run in the same allocation printed exactly the srun command lines the
#    run then used (the units and each step's share).
# Then the first job under --omni-policy=auto with the two other nodes idle: it grows into
# them (world 2 -> 4), the new units without waiting either.
# Without the capacity rule (resolve_settings starting OMNI_ELASTIC_MAX units whatever the
# allocation runs) the first case fails: two steps wait "Requested nodes are busy" and the
# job forms only at the timeout (checked 2026-12-06: formed-at-timeout after 40 s).
. "$(dirname "$0")/lib.sh"
train_commands
cluster_acquire 4 2 netns
cd "$work"
train="--steps 30"

cat >job.sh <<EOS
#!/bin/bash
# Written by $test_name: the dry run, then the run, of one case.
prog=("$demo" $train --pace-ms "\${2:-0}" --metrics "$work/\$1.jsonl")
"$launch" --dry-run -- "\${prog[@]}" >"$work/\$1.dry"
"$launch" --formation-timeout 40 -- "\${prog[@]}"
echo "launch-exit \$?"
EOS
chmod +x job.sh

# srun_left JOB: the srun processes of JOB of this cluster still alive (srun runs on this
# machine, as every node does; the hosts differ only by network namespace; another test's
# cluster may have a job of the same number).
cluster_name=$(scontrol show config | sed -n 's/^ClusterName *= *//p')
srun_left() {
  local f pid env
  for f in /proc/[0-9]*/environ; do
    pid=${f#/proc/}; pid=${pid%/environ}
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = srun ] || continue
    env=$(tr '\0' '\n' 2>/dev/null <"$f") || continue
    grep -qx "SLURM_JOB_ID=$1" <<<"$env" && grep -qx "SLURM_CLUSTER_NAME=$cluster_name" <<<"$env" &&
      proc_alive "$pid" && echo "$pid"
  done
  return 0
}

# ms ISO-TIME: milliseconds since the epoch.
ms() { date -d "$1" +%s%3N; }

# check_case NAME UNITS WORLD: the job's output $work/NAME.out as described above.
check_case() {
  local name=$1 units=$2 world=$3 out=$work/$1.out job=$4 t0 t1 left i
  expect_eq "$name: omni-launch exit" "$(sed -n 's/^launch-exit //p' "$out")" 0
  ! grep -q "Requested nodes are busy" "$out" || { cat "$out" >&2; fail "$name: a step of the job waited on another"; }
  grep -q "(initial: formed, step 0" "$out" || { cat "$out" >&2; fail "$name: the job did not form at once"; }
  expect_eq "$name: units in the dry run" "$(sed -n 's/^# \([0-9]*\) unit(s) of.*/\1/p' "$work/$name.dry")" "$units"
  expect_eq "$name: world" "$(head -n1 "$work/$name.jsonl" | sed 's/.*"world": *\([0-9]*\).*/\1/')" "$world"
  expect_eq "$name: initial steps" "$(grep -c ': initial unit [0-9]*: srun ' "$out")" "$units"
  diff <(sed -n 's/^  \(srun .*\)/\1/p' "$work/$name.dry") <(sed -n 's/.*: initial unit [0-9]*: \(srun .*\)/\1/p' "$out") ||
    fail "$name: the dry run's steps (<) are not the run's (>)"
  t0=$(ms "$(grep -m1 ' omni-launch\[[0-9]*\] info: coordinator ' "$out" | cut -d' ' -f1)")
  t1=$(ms "$(grep -m1 '(initial: formed' "$out" | cut -d' ' -f1)")
  [ $((t1 - t0)) -le 20000 ] || fail "$name: formed $((t1 - t0)) ms after omni-launch started"
  for i in $(seq 50); do left=$(srun_left "$job"); [ -z "$left" ] && break; sleep 0.1; done
  [ -z "$left" ] || fail "$name: srun process(es) $left of job $job outlived it"
  note "ok: $name: $units unit(s), world $world, formed in $((t1 - t0)) ms; $(grep -m1 -o '[0-9]* nodes\? run .*' "$out" | head -c 160)"
}

# NAME | sbatch options | units | world, worked out by hand for nodes of 2 CPUs and 2 GPUs:
#  - one rank per task asked (--ntasks-per-node=1): 2 ranks, units of 1 -> 2, of 2 -> 1 (2 nodes);
#  - --exclusive, nothing asked: the whole node, 2 CPUs and 2 GPUs -> 2 ranks a node;
#  - --gres=gpu:2 alone holds 1 CPU a node: one rank a node (a step needs a CPU of its own);
#  - --gres=gpu:2 --ntasks-per-node=2: 2 ranks a node, a GPU each.
cases=(
  "tpn1|-N2 --ntasks-per-node=1 --omni-elastic=1:4|2|2"
  "excl-tpn1|-N2 --exclusive --ntasks-per-node=1 --omni-elastic=1:4|2|2"
  "excl|-N2 --exclusive --omni-elastic=1:4|4|4"
  "tpn1-unit2|-N2 --ntasks-per-node=1 --omni-elastic=1:4 --omni-unit=2|1|2"
  "excl-tpn1-unit2|-N2 --exclusive --ntasks-per-node=1 --omni-elastic=1:4 --omni-unit=2|1|2"
  "excl-unit2|-N2 --exclusive --omni-elastic=1:4 --omni-unit=2|2|4"
  "gpu|-N2 --gres=gpu:2 --omni-elastic=1:4|2|2"
  "gpu-excl-unit2|-N2 --gres=gpu:2 --exclusive --omni-elastic=1:2 --omni-unit=2|2|4"
  "gpu-tpn2|-N2 --gres=gpu:2 --ntasks-per-node=2 --omni-elastic=1:4|4|4"
)
for c in "${cases[@]}"; do
  IFS='|' read -r name opts units world <<<"$c"
  # shellcheck disable=SC2086 # the options are words
  job=$(timeout 200 sbatch --wait --parsable -t 4 $opts -o "$work/$name.out" job.sh "$name") ||
    { cat "$work/$name.out" >&2; fail "$name ($opts) failed"; }
  check_case "$name" "$units" "$world" "${job%%;*}"
done

# The policy grows the first job into the two idle nodes (a satellite job of 2 nodes with a
# task each, as the job's own nodes hold them).
policy="auto,grow_after=2,grow_cooldown=0,interval=1"
job=$(timeout 300 sbatch --wait --parsable -t 4 -N2 --ntasks-per-node=1 --omni-elastic=1:4 --omni-policy="$policy" \
  -o "$work/policy.out" job.sh policy 200) || { cat "$work/policy.out" >&2; fail "the job under the policy failed"; }
job=${job%%;*}
grep -E 'policy:|submitted satellite|world [0-9]+ -> [0-9]+' "$work/policy.out" || true  # the log, for the reader
check_case policy 2 2 "$job"
grep -q "world 2 -> 4 (planned" "$work/policy.out" || fail "the policy did not grow the job into the idle nodes"
sat=$(sed -n 's/.*submitted satellite job \([0-9]*\) .*/\1/p' "$work/policy.out" | head -n1)
[ -n "$sat" ] || fail "no satellite job was submitted"
! grep -qs "Requested nodes are busy" "$work/slurm-$sat.out" || fail "a step of the satellite $sat waited on another"
[ -z "$(srun_left "$sat")" ] || fail "an srun of the satellite $sat outlived it"
note "ok: the policy grew the job 2 -> 4 into the idle nodes"
