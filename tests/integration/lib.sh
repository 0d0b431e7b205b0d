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
cleanup_work() { rm -rf "$work"; }
trap cleanup_work EXIT
own_cluster=

# cluster_acquire NODES GPUS_PER_NODE: reuse the cluster named by OMNI_TEST_CLUSTER (it must
# have at least that many nodes and GPUs), or start a private one that is stopped at exit.
cluster_acquire() {
  local want_nodes=$1 want_gpus=$2
  need_root
  if [ -n "${OMNI_TEST_CLUSTER:-}" ]; then
    CLUSTER_DIR=$OMNI_TEST_CLUSTER
    "$omni_cluster" --dir "$CLUSTER_DIR" status >/dev/null ||
      fail "OMNI_TEST_CLUSTER=$CLUSTER_DIR is not up ('omni-cluster --dir $CLUSTER_DIR status' fails)"
    local NODES GPUS
    eval "$(grep -E '^(NODES|GPUS)=' "$CLUSTER_DIR/cluster.env")"
    [ "$NODES" -ge "$want_nodes" ] && [ "$GPUS" -ge "$want_gpus" ] ||
      fail "OMNI_TEST_CLUSTER=$CLUSTER_DIR has $NODES node(s) x $GPUS GPU(s); this test needs $want_nodes x $want_gpus"
  else
    CLUSTER_DIR=$work/cluster
    own_cluster=1
    trap 'cluster_release; cleanup_work' EXIT
    "$top_src/tests/integration/test-cluster" "$CLUSTER_DIR" "$top_build" "$want_nodes" \
      "$want_gpus" || fail "omni-cluster up failed"
  fi
  eval "$("$omni_cluster" --dir "$CLUSTER_DIR" env)"
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

# proc_alive PID: running and not a zombie (a zombie is dead, merely not yet reaped by init).
proc_alive() {
  local st
  st=$(sed -n 's/^[0-9]* (.*) \([A-Z]\) .*/\1/p' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}

# need_built PATH...: every program the test runs exists in the build tree.
need_built() {
  local p
  for p in "$@"; do
    [ -x "$p" ] || fail "$p is not built (make in $top_build, then make check)"
  done
}
