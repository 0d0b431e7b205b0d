#!/usr/bin/env bash
# select/omni forwards every call to select/cons_tres: on two clusters of its own (2 nodes x
# 2 fake GPUs), one with SelectType=select/cons_tres and one with select/omni, the same job
# mix (held, then released at once) lands on the same nodes, CPUs and GPUs, and the same
# jobs wait. select/omni has a site topology file (omni-hal export of a 2-GPU fixture for
# both nodes), so the mix passes through its placement hook, which leaves jobs without
# --omni-unit alone. Also checked under select/omni: slurmctld loaded it and logged no error
# from it, and steps run (srun across both nodes with a GPU each).
. "$(dirname "$0")/lib.sh"
need_root
need_plugin select "this test checks its placement"
# At exit, whichever cluster is still up goes down; '|| true': the other one is down already
# (mix stops each cluster itself and fails the test when that fails).
trap 'for k in cons_tres omni; do "$omni_cluster" --dir "$work/$k" down >/dev/null 2>&1 || true; done; cleanup_work' EXIT

# mix KIND: the allocations of a fixed job mix on a fresh cluster of that select plugin,
# one line per job: its place in the mix, state, and Slurm's per-node details.
mix() {
  local dir=$work/$1 ids=() id j
  "$omni_cluster" --dir "$dir" up --nodes 2 --gpus-per-node 2 --select "$1" --build-dir "$top_build" \
    >"$work/up-$1.out" 2>&1 || { cat "$work/up-$1.out" >&2; fail "the $1 cluster did not start"; }
  eval "$("$omni_cluster" --dir "$dir" env)"
  expect_eq "SelectType of the $1 cluster" "$(scontrol show config | sed -n 's/^SelectType *= *//p')" "select/$1"
  if [ "$1" = omni ]; then
    local fixture=$top_src/tests/fixtures/topologies/synthetic-2core-2gpu.xml
    "$top_build/hal/omni-hal" export --topology "$fixture" --hostname n1 -o "$work/n1.json"
    "$top_build/hal/omni-hal" export --topology "$fixture" --hostname n2 --merge "$work/n1.json" \
      -o "$dir/etc/omni-topology.json"
    scontrol reconfigure
    for j in $(seq 1 20); do
      grep -q "select/omni: domain layouts of 2 node(s)" "$dir/log/slurmctld.log" && break
      sleep 0.5
    done
    grep -q "select/omni: domain layouts of 2 node(s)" "$dir/log/slurmctld.log" ||
      fail "select/omni did not load the site file: $(grep select/omni "$dir/log/slurmctld.log")"
  fi
  for shape in "-N1 --gres=gpu:1" "-n1 --gres=gpu:1" "-n1" "-N1 --gres=gpu:2" "-N2 --gres=gpu:1" \
               "-N1 --exclusive" "-n3"; do
    # shellcheck disable=SC2086 # the shape is split on purpose
    ids+=("$(sbatch --parsable --hold $shape -t 2 -o /dev/null --wrap 'sleep 60')")
  done
  scontrol release "$(IFS=,; echo "${ids[*]}")"
  sleep 6  # two scheduling passes
  j=0
  for id in "${ids[@]}"; do
    j=$((j + 1))
    echo "job $j $(squeue -h -j "$id" -o %T) $(scontrol show job -d "$id" | sed -n 's/^ *\(Nodes=.*\)$/\1/p' | tr '\n' ' ')"
  done
  if [ "$1" = omni ]; then
    grep -i "select/omni.*error\|error.*select/omni" "$dir/log/slurmctld.log" && fail "slurmctld logged select/omni errors (above)"
    scancel "${ids[@]}"
    sleep 1
    expect_eq "a step over both nodes under select/omni" \
      "$(srun -N2 --gres=gpu:1 -t 1 printenv SLURMD_NODENAME | sort | tr '\n' ' ')" "n1 n2 "
  fi
  scancel "${ids[@]}" 2>/dev/null || true  # '|| true': they may have ended already
  "$omni_cluster" --dir "$dir" down >/dev/null 2>&1 || fail "the $1 cluster did not stop"
}

mix cons_tres >"$work/cons_tres.txt"
mix omni >"$work/omni.txt"
cat "$work/omni.txt"
grep -q " RUNNING Nodes=" "$work/cons_tres.txt" || fail "no job of the mix ran under cons_tres: $(cat "$work/cons_tres.txt")"
grep -q " PENDING" "$work/cons_tres.txt" || fail "every job of the mix ran: the mix does not contend"
diff "$work/cons_tres.txt" "$work/omni.txt" || fail "the mix landed differently under select/omni (diff above)"
note "ok: select/omni placed $(grep -c RUNNING "$work/omni.txt") running jobs of the mix exactly as cons_tres"
