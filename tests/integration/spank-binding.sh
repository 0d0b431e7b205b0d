#!/usr/bin/env bash
# Task binding by the SPANK plugin: each task runs on the cores local to its GPU (within the
# job's allocation), learns its domain, and jobs without --omni-* options are left alone.
# The cluster's site topology file (written by tests/integration/test-cluster) makes GPU g
# local to core C-1-g of C cores: the opposite of Slurm's own block binding.
. "$(dirname "$0")/lib.sh"
cluster_acquire 2 2
topo=$CLUSTER_DIR/site-topology.json
[ -f "$topo" ] || fail "no $topo (start the cluster with tests/integration/test-cluster)"
cores=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["nodes"][0]["core_count"])' "$topo")
cpus_of_core() {  # the PUs of core $1 on n1, as the topology file lists them
  /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["nodes"][0]["core_cpus"][int(sys.argv[2])])' "$topo" "$1"
}
want0=$(cpus_of_core $(( (cores - 1) % cores )))   # GPU 0 -> core C-1
want1=$(cpus_of_core $(( (cores - 2 + cores) % cores )))  # GPU 1 -> core C-2
cd "$work"
show='echo "gpu=$CUDA_VISIBLE_DEVICES bind=$OMNI_BIND domain=$OMNI_DOMAIN allowed=$(sed -n "s/^Cpus_allowed_list:\t//p" /proc/self/status)"'

# All of the node's cores allocated (--exclusive), one task per GPU.
srun -N1 -n2 --exclusive --gpus-per-task=1 --omni-elastic=1:2 --omni-unit=1@pcie \
  bash -c "$show" | sort >"$work/bound.out" || fail "srun with --omni-* failed"
cat "$work/bound.out"
expect_eq "task on GPU 0" "$(grep '^gpu=0 ' "$work/bound.out")" "gpu=0 bind=$want0 domain=pcie:0 allowed=$want0"
expect_eq "task on GPU 1" "$(grep '^gpu=1 ' "$work/bound.out")" "gpu=1 bind=$want1 domain=pcie:1 allowed=$want1"

# The unit's domain kind names the domain.
expect_eq "domain with --omni-unit=1@node" \
  "$(srun -N1 -n1 --gpus-per-task=1 --omni-elastic=1:2 --omni-unit=1@node printenv OMNI_DOMAIN)" "node:0"

# Without --omni-* options the plugin changes nothing: Slurm's binding and environment stay.
srun -N1 -n2 --exclusive --gpus-per-task=1 bash -c "$show" | sort >"$work/plain.out"
cat "$work/plain.out"
! grep -q 'bind=[^ ]' "$work/plain.out" || fail "a job without --omni-* options got OMNI_BIND"
if [ "$want0" != 0 ] && grep -q "^gpu=0 .* allowed=$want0\$" "$work/plain.out"; then
  fail "Slurm alone put GPU 0's task on core $((cores - 1)); the test cannot tell the plugin's binding apart"
fi

# A task without a GPU is not bound, and says why.
expect_eq "OMNI_BIND of a task without GPU" \
  "$(srun -N1 -n1 --omni-elastic=1:2 printenv OMNI_BIND)" "none: the task has no GPU"
note "ok: tasks bound to their GPU's cores ($want0 and $want1)"
