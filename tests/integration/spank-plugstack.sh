#!/usr/bin/env bash
# plugstack.conf arguments, on clusters of its own: an unknown key makes slurmd refuse to
# start with the key named in its log; allow_sm_slice=yes lets --omni-sm-slice through to
# CUDA_MPS_ACTIVE_THREAD_PERCENTAGE; bind=no leaves tasks where Slurm put them; max_units
# above the default reaches omni-launch and the ranks.
. "$(dirname "$0")/lib.sh"
need_root
[ -f "$top_build/spank/.libs/spank_omni.so" ] || fail "spank_omni.so is not built"
dir=$work/cluster
trap '"$omni_cluster" --dir "$dir" down >/dev/null 2>&1 || true; cleanup_work' EXIT
rc=0
"$omni_cluster" --dir "$dir" up --nodes 1 --build-dir "$top_build" --timeout 20 \
  --spank-args "max_units=8 bnid=no" >"$work/up.out" 2>&1 || rc=$?
expect_eq "exit of up with an unknown plugstack key" "$rc" 1
grep -qF "error: omni: plugstack.conf: unknown key 'bnid' in 'bnid=no'" "$dir/log/slurmd-n1.log" ||
  fail "slurmd's log does not name the key: $(tail -5 "$dir/log/slurmd-n1.log")"
grep -q "slurmd initialization failed" "$dir/log/slurmd-n1.log" || fail "slurmd did not refuse to start"
# omni-cluster showed the reason from the log.
grep -qF "unknown key 'bnid'" "$work/up.out" || fail "omni-cluster up did not show slurmd's log"
"$omni_cluster" --dir "$dir" down --purge >/dev/null

# A site that allows SM slices, does not bind, and allows more units than the default 1024.
"$top_src/tests/integration/test-cluster" "$dir" "$top_build" 1 2 \
  --spank-args "allow_sm_slice=yes bind=no max_units=4096" >/dev/null || fail "cluster with allow_sm_slice=yes did not start"
eval "$("$omni_cluster" --dir "$dir" env)"

# max_units=4096: a range above the default limit is accepted at submit and the job runs:
# omni-launch and the trainer's ranks check it against the site's limit, which travels with
# the job (OMNI_SITE_MAX_UNITS), not against the default. Above the site's limit, sbatch
# refuses with the limit in the message.
out=$(sbatch --parsable --wait -N1 --omni-elastic=1:2048 -o "$work/big.out" \
  --wrap "\"$top_build/launcher/omni-launch\" --units 1 --events \"$work/big-events.jsonl\" -- \"$top_build/launcher/omni-train-demo\" --steps 3 --global-batch 8 --metrics \"$work/big.jsonl\"") ||
  fail "a job with --omni-elastic=1:2048 under max_units=4096 failed: $(tail -5 "$work/big.out")"
expect_eq "steps trained by the job with --omni-elastic=1:2048" "$(grep -c '"step"' "$work/big.jsonl")" 3
expect_eq "OMNI_SITE_MAX_UNITS in the job" \
  "$(srun -N1 -n1 --omni-elastic=1:2048 printenv OMNI_SITE_MAX_UNITS)" 4096
rc=0; sbatch --omni-elastic=1:4097 --wrap true >/dev/null 2>"$work/err" || rc=$?
[ $rc != 0 ] && grep -qF -- "--omni-elastic=1:4097" "$work/err" && grep -qF "expected an integer in 1..4096" "$work/err" ||
  fail "--omni-elastic=1:4097 under max_units=4096: rc=$rc, $(cat "$work/err")"
expect_eq "MPS share with --omni-sm-slice=25" \
  "$(srun -N1 -n1 --omni-sm-slice=25 bash -c 'echo $OMNI_SM_SLICE $CUDA_MPS_ACTIVE_THREAD_PERCENTAGE')" "25 25"
rc=0; srun -N1 -n1 --omni-sm-slice=101 true 2>"$work/err" || rc=$?
[ $rc != 0 ] && grep -qF "'101' is out of range; expected an integer in 1..100" "$work/err" ||
  fail "--omni-sm-slice=101 was not refused: rc=$rc $(cat "$work/err")"
# bind=no: no OMNI_BIND, and Slurm's own binding (task 0 on the first core) stays.
out=$(srun -N1 -n1 --exclusive --gpus-per-task=1 --omni-elastic=1:2 bash -c 'echo "bind=${OMNI_BIND-unset}"')
expect_eq "OMNI_BIND with bind=no" "$out" "bind=unset"
note "ok: unknown key refused by slurmd; allow_sm_slice=yes, bind=no and max_units=4096 honoured"
