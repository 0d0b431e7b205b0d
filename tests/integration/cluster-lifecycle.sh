#!/usr/bin/env bash
# omni-cluster itself: up (twice), status, a lost daemon, down with a job still running.
# Always starts its own cluster: it tests starting and stopping one.
. "$(dirname "$0")/lib.sh"
need_root
dir=$work/cluster
trap '"$omni_cluster" --dir "$dir" down >/dev/null 2>&1 || true; cleanup_work' EXIT

t0=$(date +%s%N)
"$omni_cluster" --dir "$dir" up --nodes 4 --gpus-per-node 2 --build-dir "$top_build" ||
  fail "up --nodes 4 --gpus-per-node 2 failed"
note "cold start to all nodes idle: $(( ($(date +%s%N) - t0) / 1000000 )) ms"
eval "$("$omni_cluster" --dir "$dir" env)"
expect_eq "SLURM_CONF from env" "$SLURM_CONF" "$dir/etc/slurm.conf"

# Fake GPUs are character devices with NVIDIA's major number.
for i in 0 1; do
  [ -c "$dir/dev/nvidia$i" ] || fail "$dir/dev/nvidia$i is not a character device"
  expect_eq "major,minor of nvidia$i" "$(stat -c '%t,%T' "$dir/dev/nvidia$i")" "c3,$i"
done
expect_eq "node states" "$(sinfo -h -N -p omni -o '%N %T' | sort | tr '\n' ' ')" \
  "n1 idle n2 idle n3 idle n4 idle "
expect_eq "gres per node" "$(sinfo -h -N -o '%G' | sort -u)" "gpu:h100:2"

# Every daemon runs from this directory's pid files.
pids=$(cat "$dir"/run/*.pid | tr '\n' ' ')
expect_eq "pid files" "$(ls "$dir/run" | tr '\n' ' ')" \
  "mariadbd.pid munged.pid slurmctld.pid slurmd-n1.pid slurmd-n2.pid slurmd-n3.pid slurmd-n4.pid slurmdbd.pid "
"$omni_cluster" --dir "$dir" status >"$work/status.out" || fail "status failed on a running cluster"
expect_eq "daemons reported running" "$(grep -c ' running (pid ' "$work/status.out")" 8

# 'up' again with the same request is a quick no-op; a different one is refused.
"$omni_cluster" --dir "$dir" up --nodes 4 --gpus-per-node 2 >"$work/up2.out" || fail "second up failed"
grep -q 'already up' "$work/up2.out" || fail "second up did not say 'already up': $(cat "$work/up2.out")"
expect_eq "pids after a second up" "$(cat "$dir"/run/*.pid | tr '\n' ' ')" "$pids"
rc=0; "$omni_cluster" --dir "$dir" up --nodes 3 2>"$work/up3.err" || rc=$?
expect_eq "exit of up with a different node count" "$rc" 1
grep -q 'run .* down. first' "$work/up3.err" || fail "unclear refusal: $(cat "$work/up3.err")"

# A daemon that died: status says so, and up brings the cluster back.
kill -9 "$(cat "$dir/run/slurmd-n2.pid")"
sleep 0.5
rc=0; "$omni_cluster" --dir "$dir" status >"$work/status2.out" || rc=$?
expect_eq "status exit with slurmd n2 dead" "$rc" 1
grep -q '^slurmd-n2 DOWN' "$work/status2.out" || fail "status did not report n2 down"
"$omni_cluster" --dir "$dir" up --nodes 4 --gpus-per-node 2 >/dev/null || fail "up after a lost slurmd failed"
expect_eq "nodes after restart" "$(sinfo -h -N -o '%T' | sort -u)" idle

# down with a job still running leaves nothing behind.
# The task's command line is this test's own (other tests, and tests/run-bounded, sleep too).
task="sleep 600.$$"
jobid=$(sbatch --parsable -N4 -o "$work/job.out" --wrap "srun $task")
for _ in $(seq 50); do [ "$(squeue -h -j "$jobid" -o %T)" = RUNNING ] && break; sleep 0.2; done
expect_eq "job $jobid state before down" "$(squeue -h -j "$jobid" -o %T)" RUNNING
sleep 1   # let the step's tasks start
pids=$(cat "$dir"/run/*.pid | tr '\n' ' ')
"$omni_cluster" --dir "$dir" down || fail "down failed"
for p in $pids; do
  if proc_alive "$p"; then fail "pid $p ($(cat /proc/"$p"/comm 2>/dev/null)) still runs after down"; fi
done
left=$(grep -lszxF "OMNI_CLUSTER_DAEMON_OF=$dir" /proc/[0-9]*/environ 2>/dev/null | tr "\0" "\n" || true)
[ -z "$left" ] || fail "processes started by the cluster survive down: $left"
if pgrep -fx "$task" >/dev/null; then
  fail "the job's task ($task) survived down"
fi
[ ! -e "$dir/dev" ] || fail "fake devices left behind: $(ls "$dir/dev")"
rc=0; "$omni_cluster" --dir "$dir" status >/dev/null 2>&1 || rc=$?
expect_eq "status exit after down" "$rc" 1
note "ok: up, up again, lost daemon, down"
