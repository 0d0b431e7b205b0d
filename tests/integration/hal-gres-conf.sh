#!/usr/bin/env bash
# A gres.conf written by `omni-hal gres-conf` from a topology whose core count matches this
# machine is accepted by a real slurmd, and jobs get GPUs from it. Starts its own one-node
# cluster: the gres.conf is the thing under test.
. "$(dirname "$0")/lib.sh"
need_root
omni_hal=$top_build/hal/omni-hal
[ -x "$omni_hal" ] || fail "$omni_hal is not built"
topo=$top_src/tests/fixtures/topologies/synthetic-2core-2gpu.xml
cores=$(slurmd -C | sed -n 's/.*CoresPerSocket=\([0-9]*\).*/\1/p')
sockets=$(slurmd -C | sed -n 's/.*SocketsPerBoard=\([0-9]*\).*/\1/p')
[ $((cores * sockets)) -ge 2 ] ||
  skip "this machine has $((cores * sockets)) core(s); the 2-GPU topology names cores 0-1"

dir=$work/cluster
trap '"$omni_cluster" --dir "$dir" down >/dev/null 2>&1 || true; cleanup_work' EXIT
"$omni_hal" gres-conf --topology "$topo" --node-name n1 --type h100 \
  --device-prefix "$dir/dev/nvidia" -o "$work/gres.conf" || fail "omni-hal gres-conf failed"
cat "$work/gres.conf"
# Two GPUs, each with its File=, Cores= and Links= (the topology joins them with 12 NVLinks).
expect_eq "GPU lines" "$(grep -c '^NodeName=n1 Name=gpu Type=h100 File=' "$work/gres.conf")" 2
grep -q "File=$dir/dev/nvidia0 Cores=0-1 Links=-1,12\$" "$work/gres.conf" || fail "GPU 0 line is wrong"
grep -q "File=$dir/dev/nvidia1 Cores=0-1 Links=12,-1\$" "$work/gres.conf" || fail "GPU 1 line is wrong"

"$omni_cluster" --dir "$dir" up --nodes 1 --gpus-per-node 2 --gres-conf "$work/gres.conf" \
  --build-dir "$top_build" || fail "the cluster did not start with omni-hal's gres.conf"
eval "$("$omni_cluster" --dir "$dir" env)"
if grep -iE 'error.*gres|gres.*error|invalid' "$dir/log/slurmd-n1.log"; then
  fail "slurmd complained about the gres.conf (above)"
fi
# Cores=0-1 lie on socket 0, which Slurm shows as the GPUs' socket affinity.
expect_eq "gres seen by slurmctld" "$(sinfo -h -N -p omni -o '%G')" "gpu:h100:2(S:0)"
one=$(srun -N1 --gres=gpu:1 printenv CUDA_VISIBLE_DEVICES)
case "$one" in 0|1) ;; *) fail "--gres=gpu:1 gave CUDA_VISIBLE_DEVICES='$one'" ;; esac
expect_eq "--gres=gpu:2" "$(srun -N1 --gres=gpu:2 printenv CUDA_VISIBLE_DEVICES)" "0,1"
note "ok: slurmd accepted omni-hal's gres.conf; jobs get GPUs from it"
