#!/usr/bin/env bash
# The portable route on Slurm 24.05+ (omni-job-submit(8), omni-hal(1) topology-conf): units
# that span nodes stay inside one block of topology/block. A cluster of its own, 8 nodes x 2
# fake GPUs, TopologyPlugin=topology/block with the topology.conf that omni-hal topology-conf
# writes from a site file (omni-hal export --fabric): blocks rackA n1-n4 and rackB n5-n8. A
# 2-GPU job holds n1 and another n5, so each block has 3 nodes free. Then
#   P   -N4 --gres=gpu:2 without --omni-* options (the control): topology/block keeps a job
#       no larger than a block inside one block, so it waits;
#   U   --gres=gpu:2 --omni-elastic=2:2 --omni-unit=4, two units of 2 nodes: job_submit/omni
#       asks 4 nodes in segments of 2, so it runs now, 2 + 2, each unit inside one block.
# Needs topology/block and segments (Slurm 24.05 or later): on an older Slurm the test is
# skipped, naming the version.
. "$(dirname "$0")/lib.sh"
need_root
need_plugin job_submit "this test checks the blocks it keeps units in"
version=$(slurmctld -V | awk '{ print $2 }')
case "$version" in
  2[0-3].*|24.0[0-4].*) skip "topology/block with segments needs Slurm 24.05 or later; this is $version" ;;
esac
dir=$work/cluster
# '|| true': the cluster may be down already (the test stops it itself).
trap '"$omni_cluster" --dir "$dir" down >/dev/null 2>&1 || true; cleanup_work' EXIT

fixture=$top_src/tests/fixtures/topologies/synthetic-2core-2gpu.xml
for i in 1 2 3 4 5 6 7 8; do
  rack=rack$(echo "A A A A B B B B" | cut -d' ' -f"$i")
  merge=()
  [ "$i" -gt 1 ] && merge=(--merge "$work/site.json")
  "$top_build/hal/omni-hal" export --topology "$fixture" --hostname "n$i" --fabric "$rack" "${merge[@]}" \
    -o "$work/site.json"
done
mkdir -p "$dir/etc"
"$top_build/hal/omni-hal" topology-conf -o "$dir/etc/topology.conf" "$work/site.json"
expect_eq "the blocks" "$(grep ^BlockName "$dir/etc/topology.conf" | tr '\n' ' ')" \
  "BlockName=rackA Nodes=n[1-4] BlockName=rackB Nodes=n[5-8] "
echo "TopologyPlugin=topology/block" >"$work/conf-extra"
# No accounting: this test needs none, and Debian 13's slurmdbd cannot use its MariaDB.
"$omni_cluster" --dir "$dir" up --nodes 8 --gpus-per-node 2 --no-accounting --conf-extra "$work/conf-extra" \
  --build-dir "$top_build" >"$work/up.out" 2>&1 || { cat "$work/up.out" >&2; fail "the cluster did not start"; }
eval "$("$omni_cluster" --dir "$dir" env)"
expect_eq "the topology plugin" "$(scontrol show config | sed -n 's/^TopologyPlugin *= *//p')" "topology/block"

nodes_of() { scontrol show hostnames "$(squeue -h -j "$1" -o %N)" | tr '\n' ' ' | sed 's/ $//'; }

# split ID: how job ID's nodes fall on the blocks, "A+B" (nodes in rackA + nodes in rackB).
split() {
  local a=0 b=0 n
  for n in $(nodes_of "$1"); do
    if [ "${n#n}" -le 4 ]; then a=$((a + 1)); else b=$((b + 1)); fi
  done
  echo "$a+$b"
}

run_job b1 -w n1 --gres=gpu:2
run_job b5 -w n5 --gres=gpu:2
p=$(sbatch --parsable -t 5 -o /dev/null -N4 --gres=gpu:2 --wrap 'sleep 300')
sleep 6  # two scheduling passes
# From Slurm 26.05 topology/block names its own reason (ESLURM_TOPO_NO_FIT), "Resources" before.
control=$(squeue -h -j "$p" -o '%T %r')
case "$control" in
  'PENDING Resources'|'PENDING No suitable topology unit found') ;;
  *) fail "the control: a plain 4-node job with 3 nodes free in each block: got '$control', expected PENDING for Resources (26.05: No suitable topology unit found)" ;;
esac
scancel "$p"
run_job u --gres=gpu:2 --omni-elastic=2:2 --omni-unit=4
note "two units of 2 nodes: $(nodes_of "$u") ($(split "$u"))"
expect_eq "how two units of 2 nodes fall on the blocks" "$(split "$u")" "2+2"
scancel -u root 2>/dev/null || true  # '|| true': the jobs may have ended already
"$omni_cluster" --dir "$dir" down >/dev/null 2>&1 || fail "the cluster did not stop"
note "ok: on Slurm $version two units of 2 nodes run 2+2 over two blocks, where a plain 4-node job waits for a whole block"
