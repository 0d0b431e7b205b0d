# Sourced by every integration test: paths, assertions, and a real Slurm cluster to run on.
set -euo pipefail

top_src=${OMNI_TOP_SRCDIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
top_build=${OMNI_TOP_BUILDDIR:-$top_src}
omni_cluster=$top_src/scripts/omni-cluster
test_name=$(basename "$0" .sh)

fail() { echo "FAIL: $test_name: $*" >&2; exit 1; }
skip() { echo "SKIP: $test_name: $*" >&2; exit 77; }
note() { echo "$test_name: $*"; }

# expect_eq WHAT ACTUAL EXPECTED
expect_eq() { [ "$2" = "$3" ] || fail "$1: got '$2', expected '$3'"; }

need_root() {
  [ "$(id -u)" = 0 ] || skip "needs root: it starts slurmctld, slurmd, slurmdbd, munged and MariaDB"
}

# A scratch directory removed at exit (jobs run as root, so any path works).
work=$(mktemp -d /tmp/omni-it-"$test_name".XXXXXX)
chmod 0755 "$work"   # the cluster inside runs munged as user munge
cleanup_work() { [ -n "${OMNI_KEEP_WORK:-}" ] || rm -rf "$work"; }
trap cleanup_work EXIT
own_cluster=

# cluster_acquire NODES GPUS_PER_NODE [HOSTS [UP-OPTIONS...]]: reuse the cluster named by OMNI_TEST_CLUSTER
# (it must have at least that many nodes and GPUs, and HOSTS, local or netns, when given), or
# start a private one that is stopped at exit (with --hosts HOSTS, and UP-OPTIONS, which
# always make it private). Sets CLUSTER_DIR and
# CLUSTER_HOSTS.
cluster_acquire() {
  local want_nodes=$1 want_gpus=$2 want_hosts=${3:-}
  shift $(($# < 3 ? $# : 3))
  # More options for omni-cluster up: a cluster of this test's own, never the shared one.
  local extra=("$@")
  need_root
  local NODES GPUS HOSTS=local
  if [ -n "${OMNI_TEST_CLUSTER:-}" ]; then
    "$omni_cluster" --dir "$OMNI_TEST_CLUSTER" status >/dev/null ||
      fail "OMNI_TEST_CLUSTER=$OMNI_TEST_CLUSTER is not up ('omni-cluster --dir $OMNI_TEST_CLUSTER status' fails)"
    eval "$(grep -E '^(NODES|GPUS|HOSTS)=' "$OMNI_TEST_CLUSTER/cluster.env")"
    [ "$NODES" -ge "$want_nodes" ] && [ "$GPUS" -ge "$want_gpus" ] ||
      fail "OMNI_TEST_CLUSTER=$OMNI_TEST_CLUSTER has $NODES node(s) x $GPUS GPU(s); this test needs $want_nodes x $want_gpus"
  fi
  if [ -n "${OMNI_TEST_CLUSTER:-}" ] && [ ${#extra[@]} = 0 ] && { [ -z "$want_hosts" ] || [ "$want_hosts" = "$HOSTS" ]; }; then
    CLUSTER_DIR=$OMNI_TEST_CLUSTER CLUSTER_HOSTS=$HOSTS
  else
    CLUSTER_DIR=$work/cluster CLUSTER_HOSTS=${want_hosts:-local}
    own_cluster=1
    trap 'cluster_release; cleanup_work' EXIT
    "$top_src/tests/integration/test-cluster" "$CLUSTER_DIR" "$top_build" "$want_nodes" \
      "$want_gpus" --hosts "$CLUSTER_HOSTS" "${extra[@]}" || fail "omni-cluster up failed"
  fi
  eval "$("$omni_cluster" --dir "$CLUSTER_DIR" env)"
}

# node_addr NODE: the address Slurm reaches NODE at (NodeAddr).
node_addr() { scontrol show node "$1" | sed -n 's/.*NodeAddr=\([^ ]*\).*/\1/p'; }

# check_sockets FILE: FILE holds 'NODE SS-LINE' rows (ss -Htanp on each node, prefixed with
# the node's name). Every TCP socket of slurm-omni's programs (omni-launch's coordinator, the
# ranks' coordinator clients and Gloo pairs) must be on its own node's address: listening
# there (never on a wildcard, loopback or another node's address), connected from there, or
# a loopback connection to a local daemon (the PMIx server in slurmstepd). A socket that
# slurmstepd holds too is Slurm's (mpi/pmix's listener, which tasks inherit; it listens on
# 0.0.0.0), not ours, and is left out. Sets SOCKETS_CHECKED and SOCKETS_SLURM.
check_sockets() {
  local file=$1 node addr state local_host peer_host line
  SOCKETS_CHECKED=0 SOCKETS_SLURM=0
  while IFS= read -r line; do
    case "$line" in *'"slurmstepd"'*) SOCKETS_SLURM=$((SOCKETS_SLURM + 1)); continue ;; esac
    case "$line" in *'"omni-'*|*'"toy_rank"'*) ;; *) continue ;; esac
    read -r node state _ _ local_host peer_host _ <<<"$line"
    local_host=${local_host%:*} peer_host=${peer_host%:*}
    addr=$(node_addr "$node")
    if [ "$local_host" = "$addr" ]; then :
    elif [ "$state" != LISTEN ] && [ "$local_host" = 127.0.0.1 ] && [ "$peer_host" = 127.0.0.1 ]; then :
    else fail "on $node a slurm-omni program's socket is on $local_host, not on the node's address $addr: $line"
    fi
    SOCKETS_CHECKED=$((SOCKETS_CHECKED + 1))
  done <"$file"
  [ "$SOCKETS_CHECKED" -gt 0 ] || fail "no socket of a slurm-omni program in $file: $(head -5 "$file")"
  note "$SOCKETS_CHECKED sockets of slurm-omni programs, each on its own node's address ($SOCKETS_SLURM of slurmstepd's, inherited by tasks, left out)"
}

# remote_peers FILE PROGRAM: the distinct other-node addresses that PROGRAM's connections in
# FILE (as for check_sockets) lead to.
remote_peers() {
  awk -v prog="\"$2\"" '$2 == "ESTAB" && index($0, prog) && !index($0, "\"slurmstepd\"") {
      l = $5; p = $6; sub(/:[0-9]+$/, "", l); sub(/:[0-9]+$/, "", p)
      if (l != p && p != "127.0.0.1") print p }' "$1" | sort -u
}

# run_job NAME SBATCH-ARGS...: submits a job that runs $wrap (default: sleeps 300 s) and
# waits until it runs (20 s at most); its id in the variable NAME.
run_job() {
  local name=$1 id
  shift
  id=$(sbatch --parsable -t 5 -o /dev/null "$@" --wrap "${wrap:-sleep 300}") || fail "sbatch $* failed"
  for _ in $(seq 100); do [ "$(squeue -h -j "$id" -o %T)" = RUNNING ] && break; sleep 0.2; done
  [ "$(squeue -h -j "$id" -o %T)" = RUNNING ] || fail "$name ($*) does not run: $(squeue -h -j "$id" -o '%T %r')"
  printf -v "$name" '%s' "$id"
}

cluster_release() {
  if [ -n "$own_cluster" ]; then
    "$omni_cluster" --dir "$CLUSTER_DIR" down >/dev/null 2>&1 || true
  fi
}

# job_state JOBID: the job's final state from accounting (COMPLETED, FAILED, ...). slurmdbd
# learns it a moment after 'sbatch --wait' returns (seen: PENDING just after a failed job
# ended), so an unfinished state is asked again, for up to 20 s.
job_state() {
  local s i
  for i in $(seq 100); do
    s=$(sacct -n -X -P -j "$1" -o State | tail -n 1)
    case "$s" in ""|PENDING|RUNNING|REQUEUED|RESIZING|SUSPENDED|COMPLETING|CONFIGURING) sleep 0.2 ;; *) break ;; esac
  done
  echo "$s"
}

# sbatch_until_end LIMIT SBATCH-ARGS...: submit (sbatch --parsable), print the job id, and
# wait up to LIMIT seconds until the job has left the queue, a requeue and its second run
# included; exit 0 when it ended COMPLETED. Not sbatch --wait for a job that is requeued:
# Slurm 26.05.3's loses it ("Job N no longer found and exit code not found": a requeue gives
# the job a new SLUID, which sbatch does not follow), 26.05.5's and earlier releases' do not.
sbatch_until_end() {
  local limit=$1 job t0=$SECONDS
  shift
  job=$(sbatch --parsable "$@") || return 1
  job=${job%%;*}
  echo "$job"
  while [ -n "$(squeue -h -j "$job" -o %T 2>/dev/null)" ]; do
    [ $((SECONDS - t0)) -lt "$limit" ] || { echo "job $job still queued after $limit s" >&2; return 1; }
    sleep 0.5
  done
  [ "$(job_state "$job")" = COMPLETED ]
}

# proc_alive PID: running and not a zombie (a zombie is dead, merely not yet reaped by init).
proc_alive() {
  local st
  st=$(sed -n 's/^[0-9]* (.*) \([A-Z]\) .*/\1/p' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}

# launch_mpi: how omni-launch's steps start their ranks on this cluster (omni-launch --mpi):
# OMNI_LAUNCH_MPI when it says pmix or none (the tests then run without PMIx with
# OMNI_LAUNCH_MPI=none, on a Slurm that has it), else pmix where srun --mpi=list offers it,
# else none (Debian unstable's 26.05.5). Call it after cluster_acquire (srun needs SLURM_CONF).
launch_mpi() {
  case "${OMNI_LAUNCH_MPI:-auto}" in
    pmix|none) echo "$OMNI_LAUNCH_MPI" ;;
    *) if slurm_has_pmix; then echo pmix; else echo none; fi ;;
  esac
}

# slurm_has_pmix: this cluster's srun offers mpi/pmix (`srun --mpi=list`, the same format from
# 22.05 through 26.05). Debian unstable's 26.05.5 is built without it.
slurm_has_pmix() {
  srun --mpi=list 2>/dev/null | grep -qE '^[[:space:]]*pmix(_v[0-9]+)?[[:space:]]*$|versions available: .*pmix_'
}

# no_pmix_reason: why a check under srun --mpi=pmix cannot run here, for skip and note.
no_pmix_reason() {
  echo "this Slurm ($(slurmctld -V 2>/dev/null | awk '{ print $2 }')) has no mpi/pmix plugin (srun --mpi=list offers: $(srun --mpi=list 2>&1 | sed 's/^srun: //; s/^[[:space:]]*//' | grep -vi 'types are' | paste -sd' '))"
}

# need_plugin job_submit|select WHY: skip unless job_submit/omni (select/omni) was built, with
# configure's own reason (its summary in config.log: on Debian unstable's 26.05, that it needs
# a source tree of Slurm 26.05.5, which the mirror lacks), and WHY the test needs it.
need_plugin() {
  local so=$top_build/job_submit/.libs/job_submit_omni.so note
  [ "$1" = select ] && so=$top_build/select_plugin/.libs/select_omni.so
  [ -f "$so" ] && return 0
  note=$(sed -n "s|^  $1/omni built *||p" "$top_build/config.log" 2>/dev/null | tail -n 1)
  skip "$1/omni is not built (configure: ${note:-no summary in $top_build/config.log}): $2"
}

# need_built PATH...: every program the test runs exists in the build tree.
need_built() {
  local p
  for p in "$@"; do
    [ -x "$p" ] || fail "$p is not built (make in $top_build, then make check)"
  done
}

# The commands of the training tests, built: $launch, $ctl, $demo, $at_step (at-step, which
# batch scripts use to act on a job at a given step) and $rank_pids (rank-pids: a unit's ranks).
train_commands() {
  launch=$top_build/launcher/omni-launch
  ctl=$top_build/launcher/omni-ctl
  demo=$top_build/launcher/omni-train-demo
  at_step=$top_src/tests/integration/at-step
  rank_pids=$top_src/tests/integration/rank-pids
  need_built "$launch" "$ctl" "$demo"
}

# write_static_job FILE UNITS ARGS: a batch script that trains at a fixed size, the reference
# the elastic runs are compared with: omni-train-demo ARGS under omni-launch --units UNITS,
# its metrics in $work/static.jsonl and its events in $work/static-events.jsonl.
write_static_job() {
  cat >"$1" <<EOS
#!/bin/bash
exec "$launch" --units $2 --events "$work/static-events.jsonl" -- "$demo" $3 --metrics "$work/static.jsonl"
EOS
  chmod +x "$1"
}

# same_training NAME STEPS D STEPS_PER_EPOCH [redone-ok]: the run $work/NAME.jsonl is the
# static run's step for step, bitwise (same-steps.py), and the sample logs in $work/samples
# used every sample once per epoch (exactly-once.py); unless redone-ok (the lost-rank path),
# no step was trained twice either.
same_training() {
  /usr/bin/python3 "$top_src/tests/integration/same-steps.py" "$work/static.jsonl" "$work/$1.jsonl" "$2" ||
    fail "the static run and $1 differ (above)"
  /usr/bin/python3 "$top_src/tests/integration/exactly-once.py" "$work/samples" "$3" "$4" "$2" >"$work/once.txt" ||
    { cat "$work/once.txt"; fail "samples of $1 (above)"; }
  cat "$work/once.txt"
  [ "${5:-}" = redone-ok ] || grep -q "(.* 0 steps redone after a rewind)" "$work/once.txt" ||
    fail "$1 trained steps twice"
}

# planned_worlds NAME W0 W1 ...: the run $work/NAME.jsonl trained at worlds W0, W1, ... in
# that order, and its events ($work/NAME-events.jsonl) begin with the initial W0 and one
# planned change per later world, with no loss among them.
planned_worlds() {
  local name=$1
  shift
  /usr/bin/python3 - "$work/$name.jsonl" "$work/$name-events.jsonl" "$@" <<'PY' || fail "the $name run's sizes and events (above)"
import json, sys
worlds = [json.loads(l)["world"] for l in open(sys.argv[1])]
events = [json.loads(l) for l in open(sys.argv[2])]
want = [int(w) for w in sys.argv[3:]]
seq = [w for i, w in enumerate(worlds) if i == 0 or worlds[i - 1] != w]
assert seq == want, seq
got = [(e["reason"], e["old_world"], e["new_world"]) for e in events]
steps = [("initial", 0, want[0])] + [("planned", a, b) for a, b in zip(want, want[1:])]
assert got[:len(steps)] == steps, got
assert not any(e["reason"] == "lost" for e in events), got
print("ok: worlds", seq, "events", got)
PY
}

# start_training NAME NODES 'LAUNCH ARGS' 'TRAINER ARGS': $work/NAME.sh runs omni-train-demo
# under omni-launch (its events in $work/NAME-events.jsonl, its metrics in $work/NAME.jsonl,
# its samples in $work/samples), prints "launch-exit STATUS" and exits with it; submitted with
# `sbatch --wait -NNODES --ntasks-per-node=1` in the background (output $work/NAME.out).
# Sets sbatch_pid (wait for it) and job (the job's id).
start_training() {
  mkdir -p "$work/samples"
  cat >"$work/$1.sh" <<EOS
#!/bin/bash
"$launch" $3 --events "$work/$1-events.jsonl" \\
  -- "$demo" $4 --metrics "$work/$1.jsonl" --sample-log "$work/samples"
rc=\$?
echo "launch-exit \$rc"
exit \$rc
EOS
  chmod +x "$work/$1.sh"
  timeout 180 sbatch --wait -N"$2" --ntasks-per-node=1 -t 5 -o "$work/$1.out" --parsable "$work/$1.sh" >"$work/$1.id" &
  sbatch_pid=$!
  for _ in $(seq 100); do [ -s "$work/$1.id" ] && break; sleep 0.1; done
  job=$(cat "$work/$1.id")
  [ -n "$job" ] || fail "no job id from sbatch for $1.sh"
}

# elastic_job FILE NAME 'LAUNCH ARGS' 'TRAINER ARGS' < BODY: a batch script that runs
# omni-train-demo under omni-launch in the background, its metrics in $work/NAME.jsonl and
# its events in $work/NAME-events.jsonl, then BODY (shell lines read from stdin), then waits
# for omni-launch, prints "launch-exit STATUS" and exits with it. BODY may call
#   at_step N            wait for step N;
#   units_are K          wait (30 s at most) until the coordinator reports K units;
#   bad NAME ARGS...     run omni-ctl ARGS, its output to $work/bad-NAME.out, and print
#                        "bad NAME STATUS" (for the refusals a test expects).
elastic_job() {
  {
    printf '#!/bin/bash\n# Written by %s: the trainer under omni-launch (%s).\nset -u\n' "$test_name" "$2"
    printf '"%s" %s --events "%s" -- "%s" %s --metrics "%s" &\n' \
      "$launch" "$3" "$work/$2-events.jsonl" "$demo" "$4" "$work/$2.jsonl"
    printf 'pid=$!\nat_step() { "%s" "%s" "$1"; }\n' "$at_step" "$work/$2.jsonl"
    printf 'units_are() {\n  for _ in $(seq 300); do\n    "%s" status --json 2>/dev/null | grep -q "^  \\"units\\": $1,$" && return 0\n    sleep 0.1\n  done\n  echo "never had $1 units"; return 1\n}\n' "$ctl"
    printf 'bad() { "%s" "${@:2}" >"%s/bad-$1.out" 2>&1; echo "bad $1 $?"; }\n' "$ctl" "$work"
    cat
    printf 'wait $pid\nrc=$?\necho "launch-exit $rc"\nexit $rc\n'
  } >"$1"
  chmod +x "$1"
}
