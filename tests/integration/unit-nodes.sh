#!/usr/bin/env bash
# job_submit/omni gives an elastic job of units that names no node count the node range its
# units need (omni-job-submit(8)), on the local cluster (4 nodes x 2 fake GPUs). Jobs are
# submitted held and their node counts read back from slurmctld (scontrol show job):
#   G GPUs a node, units of N, MIN..MAX units    expected nodes (worked out by hand)
#   2, 2, 1..2                                   1-2  (one unit a node)
#   2, 1, 2..4                                   1-2  (two units a node: ceil(2/2)..4/2)
#   2 (typed gpu:h100:2), 2, 1..2                1-2
#   2 (--gpus-per-node=2), 2, 1..2               1-2
#   1, 2, 1..2                                   2-4  (a unit spans 2 nodes)
#   2, 4, 1..1                                   2-2
# and left as submitted (the node count of the same job without --omni-* options): -N1
# given; no GPUs; 2 GPUs a node with units of 3 (no whole split).
# A held job then released runs on the nodes its range allows (the 2-node unit on two). And
# end to end: an elastic 1..8 job of units of 2 GPUs asks 1-8 nodes, Slurm gives it what is
# free (at most the 4 nodes there are), and omni-launch (no --units) starts the units those
# nodes hold, one a node, not MAX.
. "$(dirname "$0")/lib.sh"
need_plugin job_submit "this test checks the node ranges it gives units"
cluster_acquire 4 2
grep -qx "JobSubmitPlugins=omni" "$CLUSTER_DIR/etc/slurm.conf" || fail "the cluster does not load job_submit/omni"

# nodes ARGS...: the node count slurmctld recorded for a held job with these sbatch options
# (run in a subshell: the job ids go to a file).
nodes() {
  local id
  id=$(sbatch --parsable --hold -t 2 -o /dev/null "$@" --wrap 'sleep 30') || fail "sbatch $* refused"
  echo "$id" >>"$work/ids"
  scontrol show job "$id" | sed -n 's/.*NumNodes=\([^ ]*\).*/\1/p'
}
expect_eq "gpu:2, units of 2, 1..2" "$(nodes --gres=gpu:2 --omni-elastic=1:2 --omni-unit=2)" "1-2"
expect_eq "gpu:2, units of 1, 2..4" "$(nodes --gres=gpu:2 --omni-elastic=2:4 --omni-unit=1)" "1-2"
expect_eq "gpu:h100:2, units of 2, 1..2" "$(nodes --gres=gpu:h100:2 --omni-elastic=1:2 --omni-unit=2)" "1-2"
expect_eq "--gpus-per-node=2, units of 2, 1..2" "$(nodes --gpus-per-node=2 --omni-elastic=1:2 --omni-unit=2)" "1-2"
expect_eq "gpu:1, units of 2, 1..2" "$(nodes --gres=gpu:1 --omni-elastic=1:2 --omni-unit=2)" "2-4"
expect_eq "gpu:2, units of 4, 1..1" "$(nodes --gres=gpu:2 --omni-elastic=1:1 --omni-unit=4)" "2-2"
# Left alone: the node count is what the same job without --omni-* options gets.
expect_eq "-N1 given" "$(nodes -N1 --gres=gpu:2 --omni-elastic=1:2 --omni-unit=2)" "$(nodes -N1 --gres=gpu:2)"
expect_eq "no GPUs" "$(nodes --omni-elastic=1:2 --omni-unit=2)" "$(nodes -n1)"
expect_eq "gpu:2, units of 3" "$(nodes --gres=gpu:2 --omni-elastic=1:2 --omni-unit=3)" "$(nodes --gres=gpu:2)"
mapfile -t ids <"$work/ids"
scancel "${ids[@]}"

span=$(sbatch --parsable -t 2 -o /dev/null --gres=gpu:2 --omni-elastic=1:1 --omni-unit=4 --wrap 'sleep 30')
# Other tests may hold nodes of the shared cluster for a while.
for _ in $(seq 600); do [ "$(squeue -h -j "$span" -o %T)" = RUNNING ] && break; sleep 0.2; done
expect_eq "the 2-node unit's nodes" "$(squeue -h -j "$span" -o '%T %D')" "RUNNING 2"
scancel "$span"
train_commands
cat >"$work/elastic.sh" <<EOS
#!/bin/bash
echo "\$SLURM_JOB_NUM_NODES" >"$work/elastic.nodes"
exec "$launch" --events "$work/events.jsonl" -- "$demo" --steps 5 --dataset-size 960 --global-batch 48 \
  --micro-batch 2 --metrics "$work/metrics.jsonl"
EOS
chmod 0755 "$work/elastic.sh"
timeout 300 sbatch --wait --parsable --gres=gpu:2 --ntasks-per-node=2 -t 3 --omni-elastic=1:8 --omni-unit=2 \
  -o "$work/elastic.out" "$work/elastic.sh" >/dev/null || { cat "$work/elastic.out" >&2; fail "the elastic job failed"; }
/usr/bin/python3 - "$work/events.jsonl" "$(cat "$work/elastic.nodes")" <<'PY' || { cat "$work/elastic.out" >&2; fail "the elastic job's events (above)"; }
import json, sys
got = [(e["reason"], e["old_world"], e["new_world"]) for e in map(json.loads, open(sys.argv[1]))]
nodes = int(sys.argv[2])
assert 1 <= nodes <= 4, nodes
assert got[0] == ("initial", 0, 2 * nodes), (nodes, got)  # one unit of 2 ranks a node, not 8
print("ok: %d node(s), events %s" % (nodes, got))
PY
note "ok: node ranges from units, GPUs per node and MIN..MAX; explicit and unsplittable requests left alone"
