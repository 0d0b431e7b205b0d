#!/usr/bin/env bash
# SM slices through Slurm's own gres/mps, on a cluster of its own (one node, one fake GPU
# offered as 100 MPS shares: omni-cluster --mps, the SPANK plugin with allow_sm_slice=yes and
# job_submit/omni loaded). job_submit/omni turns --omni-sm-slice=P into gres/mps:P. Checked:
#  - two --omni-sm-slice=50 jobs run at once on the same GPU, each with
#    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50; a third waits for resources;
#  - a whole-GPU job (--gres=gpu:1) waits while slices hold the GPU, and a slice waits while a
#    whole-GPU job holds it;
#  - a slice that also asks for whole GPUs is refused at submit, naming both, nothing queued;
#  - a job without --omni-* options keeps its request untouched.
. "$(dirname "$0")/lib.sh"
need_plugin job_submit "it turns slices into gres/mps"
cluster_acquire 1 1 local --mps --spank-args "allow_sm_slice=yes"
grep -qx "JobSubmitPlugins=omni" "$CLUSTER_DIR/etc/slurm.conf" || fail "the cluster does not load job_submit/omni"
expect_eq "the node's GRES" "$(sinfo -h -N -o '%G' | head -n1)" "gpu:h100:1,mps:h100:100"
cd "$work"

state() { squeue -h -j "$1" -o %T; }
wait_state() {  # wait_state JOB STATE: up to 20 s
  for _ in $(seq 200); do [ "$(state "$1")" = "$2" ] && return 0; sleep 0.1; done
  fail "job $1 is '$(state "$1")', not $2"
}
slice() { sbatch --parsable --omni-sm-slice=50 -t 2 -o "$work/slice-%j.out" \
  --wrap 'echo "pct=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE gpus=$SLURM_JOB_GPUS"; sleep 60'; }

a=$(slice) b=$(slice) c=$(slice)
wait_state "$a" RUNNING
wait_state "$b" RUNNING
sleep 2
expect_eq "the third slice's state" "$(state "$c")" PENDING
# Slurm writes a GRES request "gres:mps:50" through 23.02 and "gres/mps:50" from 23.11 on
# (job_submit/omni writes the release's form: the other one is refused at submit there).
mps_form=gres:mps:50
[ "$(scontrol --version | awk '{ split($2, v, "."); print (v[1] * 100 + v[2] >= 2311) }')" = 0 ] || mps_form=gres/mps:50
expect_eq "a slice's request" "$(squeue -h -j "$a" -o %b)" "$mps_form"
for j in $a $b; do
  for _ in $(seq 100); do [ -s "$work/slice-$j.out" ] && break; sleep 0.1; done
  expect_eq "job $j's MPS share and GPU" "$(cat "$work/slice-$j.out")" "pct=50 gpus=0"
done
whole=$(sbatch --parsable --gres=gpu:1 -t 2 -o /dev/null --wrap 'sleep 60')
sleep 2
expect_eq "a whole-GPU job beside two slices" "$(state "$whole")" PENDING
scancel "$a" "$b" "$c"
wait_state "$whole" RUNNING
late=$(slice)
sleep 2
expect_eq "a slice beside a whole-GPU job" "$(state "$late")" PENDING
scancel "$whole" "$late"

rc=0
sbatch --job-name "omni-both-$$" --omni-sm-slice=50 --gres=gpu:1 --wrap true >"$work/out" 2>"$work/err" || rc=$?
[ $rc != 0 ] || fail "a slice with --gres=gpu:1 was accepted"
grep -qF -- "--omni-sm-slice=50 cannot be combined with whole GPUs" "$work/err" || fail "no clear refusal: $(cat "$work/err")"
[ -z "$(squeue -h -t all -n "omni-both-$$")" ] || fail "the refused job was queued"
plain=$(sbatch --parsable --hold -N1 --wrap true)
expect_eq "a plain job's request" "$(squeue -h -j "$plain" -o %b)" "N/A"
scancel "$plain"
note "ok: --omni-sm-slice=50 jobs share a GPU through gres/mps, a third and whole-GPU jobs wait"
