#!/usr/bin/env bash
# The load soak of issue #46 (`make check-soak`; not part of make check: it runs for
# OMNI_SOAK_MINUTES). On a private local cluster of its own (netns hosts, cores
# oversubscribed), for OMNI_SOAK_MINUTES (default 10):
#  - OMNI_SOAK_JOBS slots (default 8) each run elastic jobs one after another: omni-train-demo
#    under omni-launch as user nobody, 3 units on 3 nodes, with checkpoints and a sample log;
#    every OMNI_SOAK_GAP seconds (default 4) the soak resizes each one, alternately by
#    `scontrol update JobId=J NumNodes=` (deferred by job_submit/omni, drained by omni-launch)
#    and `omni-ctl --job J grow|shrink` (satellite jobs and node releases);
#  - a stream of ordinary jobs of user daemon (sbatch --wrap 'sleep 1..5'), at most
#    OMNI_SOAK_ORDINARY_MAX (default 400), at most 6 at a time;
#  - a probe (root) once a second times `squeue` and `sbatch --hold` (then scancel), and
#    every 10 s records sdiag's server threads and agent queue.
# Checked, each naming what failed: every elastic job COMPLETED with every step bitwise a
# static run's, every sample once per epoch, no step redone, no unit lost, at least one
# resize applied, no satellite left; every resize command returned in time and did what it
# said (late ones, on a job already finishing, are counted apart); the probe's worst squeue
# and sbatch within OMNI_SOAK_LATENCY_MS (default 1000); then, with every job ended, no job
# or step in squeue, no process in the nodes' namespaces but slurmd, no process of this
# build's programs and no srun/salloc/slurmstepd of this cluster anywhere, no TCP socket but
# the daemons', no new namespace, no file of the jobs left in /tmp, /dev/shm, the nodes'
# TmpFS or spool; after teardown no namespace, bridge or daemon of the cluster left.
# Reported (table on stdout and in OMNI_SOAK_SUMMARY, default ./soak-summary.txt): the
# latencies (worst, p99), sdiag's cycle times and RPCs by type and user, and the RPCs of the
# elastic jobs' user per elastic job per minute.
#
# Bounded: it runs itself under timeout(1), OMNI_SOAK_MINUTES + 15 minutes in all, and every
# command it waits for has a limit of its own.
set -euo pipefail
if [ -z "${OMNI_SOAK_BOUNDED:-}" ]; then
  export OMNI_SOAK_BOUNDED=$(( ${OMNI_SOAK_MINUTES:-10} * 60 + 900 ))
  exec timeout -k 60 "$OMNI_SOAK_BOUNDED" bash "$0" "$@"
fi
. "$(dirname "$0")/../integration/lib.sh"

n_jobs=${OMNI_SOAK_JOBS:-8}
minutes=${OMNI_SOAK_MINUTES:-10}
n_nodes=${OMNI_SOAK_NODES:-4}
gap=${OMNI_SOAK_GAP:-4}
ord_max=${OMNI_SOAK_ORDINARY_MAX:-400}
ord_conc=6
latency_limit_ms=${OMNI_SOAK_LATENCY_MS:-1000}
summary=${OMNI_SOAK_SUMMARY:-$PWD/soak-summary.txt}
# 10 steps per epoch (480 / 48); B = 48 with b = 4 keeps GA whole at 1, 2 and 3 units. A job
# trains 500 steps at >= 150 ms each: 75 s or more, so each slot runs several jobs and each
# job is resized ~10 times.
steps=${OMNI_SOAK_STEPS:-500}
pace_ms=150
train="--steps $steps --dataset-size 480 --lr 0.05 --warmup 5 --global-batch 48 --micro-batch 4"
for v in n_jobs minutes n_nodes gap ord_max steps latency_limit_ms; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "soak: $v='${!v}' is not a positive integer" >&2; exit 2; }
done
[ "$n_nodes" -ge 3 ] || { echo "soak: OMNI_SOAK_NODES must be at least 3 (an elastic job starts on 3)" >&2; exit 2; }

train_commands
id nobody >/dev/null && id daemon >/dev/null || skip "needs the users nobody and daemon (Debian's base passwd)"
need_root

# Taken before the cluster exists: what /tmp and /dev/shm hold of others (other users' and
# other clusters' files come and go meanwhile; only the jobs' users' new files count).
listing() { find /tmp /dev/shm -maxdepth 2 -mindepth 1 \( -user nobody -o -user daemon \) -printf '%p\n' 2>/dev/null | sort; }
listing >"$work/files-before.txt"

# Netns hosts, not local ones: every node is a host of its own as on a real cluster (the
# ranks' Gloo and coordinator sockets cross hosts), and the namespaces give the leak checks
# an exact boundary: once the jobs end, each node's namespace holds its slurmd and nothing
# else. Oversubscribed 16-fold: 8 jobs of 3 nodes, their satellites and the ordinary jobs
# share the four nodes' cores (this machine has 2), where exclusive nodes would fit one job.
cluster_acquire "$n_nodes" 0 netns --oversubscribe 16
base=$(sed -n 's/^PORT_BASE=//p' "$CLUSTER_DIR/cluster.env" 2>/dev/null || true)
[ -n "$base" ] || base=$(sed -n 's/^SlurmctldPort=//p' "$CLUSTER_DIR/etc/slurm.conf")
cluster=$(sed -n 's/^ClusterName=//p' "$CLUSTER_DIR/etc/slurm.conf")
ns_list() { ip netns list 2>/dev/null | awk '{ print $1 }' | grep -E "^omni$base-(ctl|n[0-9]+)\$" | sort || true; }
ns_list >"$work/ns-cluster.txt"
expect_eq "namespaces of the cluster" "$(wc -l <"$work/ns-cluster.txt")" $((n_nodes + 1))

# What each namespace holds with no job: its daemons' processes and sockets.
ns_procs() { local p; for p in $(ip netns pids "$1" 2>/dev/null); do printf '%s %s\n' "$p" "$(cat "/proc/$p/comm" 2>/dev/null)"; done; }
ns_sockets() { nsenter --net="/run/netns/$1" ss -Htanp 2>/dev/null | sed "s/^/$1 /"; }
for ns in $(cat "$work/ns-cluster.txt"); do ns_procs "$ns" | awk '{ print $2 }'; done | sort -u >"$work/daemons.txt"

u=$work/u
mkdir -p "$u" && chmod 0777 "$u"
cd "$work"
pids=()
stop_children() {
  local p
  # '|| true': a background job may have ended already.
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  # Only while the cluster is up: against a stopped slurmctld scancel would wait its timeout.
  if [ -n "$own_cluster" ]; then timeout 30 scancel -u nobody; timeout 30 scancel -u daemon; fi 2>/dev/null || true
}
# On timeout(1)'s SIGTERM or an interrupt: the background loops and the jobs go first, then
# lib.sh's cluster_release and the work directory.
trap 'exit 124' TERM INT
trap 'stop_children; cluster_release; cleanup_work' EXIT
keep_failing() { export OMNI_KEEP_WORK=1; }
failures=$work/failures.txt
: >"$failures"
bad() { echo "$*" >>"$failures"; echo "soak: FAILURE: $*" >&2; }

# The reference: the same training at a fixed 3 units.
write_static_job static.sh 3 "$train"
timeout 600 sbatch --wait -N3 -t 15 -o "$work/static.out" --parsable static.sh >/dev/null ||
  { cat "$work/static.out" >&2; fail "the static job failed"; }

now_ms() { date +%s%3N; }
elapsed_ms() { echo $(( $(now_ms) - $1 )); }
units_of() {  # the job's units now: the world of its last change (1 rank per unit)
  /usr/bin/python3 -c '
import json, sys
w = None
for l in open(sys.argv[1]):
    e = json.loads(l)
    if "new_world" in e and e.get("reason") != "stop": w = e["new_world"]
print(w if w is not None else 0)' "$1" 2>/dev/null || echo 0
}
nodes_of() { scontrol show job "$1" 2>/dev/null | sed -n 's/^ *NumNodes=\([0-9]*\) .*/\1/p'; }
# The last step in a metrics file (0 before the first): a line being written still starts
# with its step.
last_step() { local s; s=$(tail -n 1 "$1" 2>/dev/null | sed -n 's/^{"step": \([0-9]*\).*/\1/p'); echo "${s:-0}"; }
running() { [ "$(squeue -h -j "$1" -o %T 2>/dev/null)" = RUNNING ]; }

# act SLOT JOB DIR KIND: one resize of JOB, its outcome a line in actions.txt:
# KIND JOB RESULT MS FROM->TO. RESULT ok, late (failed but the training was ending) or failed.
act() {
  local slot=$1 job=$2 d=$3 kind=$4 t0 rc=0 from to want m
  from=$(units_of "$d/events.jsonl")
  t0=$(now_ms)
  case $kind in
    scontrol)
      m=$(nodes_of "$job")
      want=$((m - 1))
      timeout 30 scontrol update JobId="$job" NumNodes="$want" >"$d/act.out" 2>&1 || rc=$?
      # Done once Slurm lists the fewer nodes (omni-launch drained their units, then released).
      if [ $rc = 0 ]; then
        rc=1
        for _ in $(seq 240); do
          [ "$(nodes_of "$job")" = "$want" ] && { rc=0; break; }
          running "$job" || break
          sleep 0.25
        done
      fi ;;
    grow) timeout 120 "$ctl" --job "$job" grow --units $((from + 1)) --wait 90 >"$d/act.out" 2>&1 || rc=$? ;;
    shrink) timeout 120 "$ctl" --job "$job" shrink --units $((from - 1)) --wait 90 >"$d/act.out" 2>&1 || rc=$? ;;
  esac
  local ms result=ok
  ms=$(elapsed_ms "$t0")
  to=$(units_of "$d/events.jsonl")
  if [ $rc != 0 ]; then
    result=failed
    # A command that lost the race with the end of the training is no fault of the product.
    if ! running "$job" || [ "$(last_step "$d/metrics.jsonl")" -ge $((steps - 40)) ] 2>/dev/null; then result=late; fi
  fi
  echo "$kind $job $result $ms $from->$to" >>"$work/actions.txt"
  if [ $result = failed ]; then
    bad "slot $slot job $job: $kind (units $from, nodes ${m:-?}) failed, exit $rc after $ms ms: $(tail -n 3 "$d/act.out" | tr '\n' ' ')"
    cat "$d/act.out" >>"$d/act-failed.out"
  fi
}

# check_job SLOT JOB DIR: the equivalence checks of one finished elastic job.
check_job() {
  local slot=$1 job=$2 d=$3 state
  state=$(job_state "$job")
  [ "$state" = COMPLETED ] || { bad "slot $slot job $job: state $state: $(tail -n 5 "$d/job.out" | tr '\n' ' ')"; return; }
  /usr/bin/python3 "$top_src/tests/integration/same-steps.py" "$work/static.jsonl" "$d/metrics.jsonl" "$steps" >"$d/same.txt" 2>&1 ||
    { bad "slot $slot job $job: not the static run's steps: $(tail -n 3 "$d/same.txt" | tr '\n' ' ')"; return; }
  /usr/bin/python3 "$top_src/tests/integration/exactly-once.py" "$d/samples" 480 10 "$steps" >"$d/once.txt" 2>&1 ||
    { bad "slot $slot job $job: samples: $(tail -n 3 "$d/once.txt" | tr '\n' ' ')"; return; }
  grep -q "(.* 0 steps redone after a rewind)" "$d/once.txt" || { bad "slot $slot job $job: steps trained twice: $(cat "$d/once.txt")"; return; }
  local changes
  changes=$(/usr/bin/python3 - "$d/events.jsonl" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
ch = [e for e in ev if e.get("reason") in ("planned", "lost")]
print(sum(e["reason"] == "planned" for e in ch), sum(e["reason"] == "lost" for e in ch))
PY
  ) || { bad "slot $slot job $job: unreadable events"; return; }
  read -r planned lost <<<"$changes"
  [ "$lost" = 0 ] || { bad "slot $slot job $job: $lost unit loss(es) in the events"; return; }
  [ "$planned" -ge 1 ] || { bad "slot $slot job $job: no resize applied"; return; }
  [ -z "$(squeue -h --name "omni-sat-$job" -o %i)" ] || { bad "slot $slot job $job: a satellite outlived it"; return; }
  echo "$slot $job ok $planned" >>"$work/checked.txt"
}

# slot SLOT: elastic jobs one after another until the soak's end, each resized every $gap s.
slot() {
  local k=$1 n=0 job d kind i
  set +e
  while [ "$(date +%s)" -lt "$end" ]; do
    n=$((n + 1)) d=$u/e$k-$n
    mkdir -p "$d/samples" && chmod -R 0777 "$d"
    cat >"$d/job.sh" <<EOS
#!/bin/bash
exec "$launch" --units 3 --boundary-timeout 60 --events "$d/events.jsonl" -- "$demo" $train \
  --pace-ms $pace_ms --sample-log "$d/samples" --ckpt "$d/ckpt" --ckpt-every 25 --metrics "$d/metrics.jsonl"
EOS
    chmod 0755 "$d/job.sh"
    job=$(cd "$d" && timeout 30 runuser -u nobody -- sbatch --parsable -N3 --ntasks-per-node=1 -t 12 \
      --omni-elastic=1:3 -J "soak-e$k" -o "$d/job.out" "$d/job.sh")
    job=${job%%;*}
    [ -n "$job" ] || { bad "slot $k: sbatch of elastic job $n failed"; sleep 5; continue; }
    echo "$k $job $d" >>"$work/elastic-jobs.txt"
    "$at_step" "$d/metrics.jsonl" 3 180 >/dev/null || { bad "slot $k job $job never trained: $(tail -n 3 "$d/job.out" | tr '\n' ' ')"; scancel "$job"; continue; }
    i=0
    while running "$job" && [ "$(last_step "$d/metrics.jsonl")" -lt $((steps - 60)) ]; do
      sleep "$gap"
      running "$job" || break
      # scontrol, ctl, scontrol, ctl...: scontrol only while the job has a node to give up
      # (the batch host stays); omni-ctl grows while below 3 units, shrinks at 3.
      if [ $((i % 2)) = 0 ] && [ "$(nodes_of "$job")" -gt 1 ]; then kind=scontrol
      elif [ "$(units_of "$d/events.jsonl")" -lt 3 ]; then kind=grow
      else kind=shrink
      fi
      act "$k" "$job" "$d" "$kind"
      i=$((i + 1))
    done
    # The job ends by itself (its -t 12 bounds it).
    for _ in $(seq 1500); do [ -z "$(squeue -h -j "$job" -o %i 2>/dev/null)" ] && break; sleep 0.5; done
    check_job "$k" "$job" "$d"
  done
}

# The ordinary jobs of user daemon.
ordinary() {
  local sent=0 active
  set +e
  RANDOM=46
  while [ "$(date +%s)" -lt "$end" ] && [ $sent -lt "$ord_max" ]; do
    active=$(squeue -h -u daemon -o %i 2>/dev/null | wc -l)
    if [ "$active" -lt $ord_conc ]; then
      (cd / && timeout 30 runuser -u daemon -- sbatch --parsable -n1 -t 2 -J soak-ord -o /dev/null \
        --wrap "sleep $((1 + RANDOM % 5))") >>"$work/ordinary.txt" 2>>"$work/ordinary.err" ||
        echo "sbatch failed" >>"$work/ordinary.err"
      sent=$((sent + 1))
    fi
    sleep 1
  done
}

# The probe: once a second squeue and sbatch --hold (then scancel); every 10 s sdiag. Until
# the last elastic job has ended (the slots start no job after the end, but finish theirs).
# Beside them `squeue --version`, which starts the same program and asks slurmctld nothing:
# what of a probe's time is this machine's, not slurmctld's.
probe() {
  local t0 t1 sq sb id i=0 rc base
  set +e
  while [ ! -e "$work/load-done" ]; do
    t1=$(now_ms)
    squeue --version >/dev/null 2>&1
    base=$(elapsed_ms "$t1")
    t0=$(now_ms); rc=0
    timeout 30 squeue >/dev/null 2>&1 || rc=$?
    sq=$(elapsed_ms "$t0")
    [ $rc = 0 ] || echo "squeue exit $rc after $sq ms" >>"$work/probe.err"
    t0=$(now_ms)
    id=$(timeout 30 sbatch --parsable --hold -J soak-probe -o /dev/null --wrap true 2>>"$work/probe.err")
    rc=$?
    sb=$(elapsed_ms "$t0")
    [ $rc = 0 ] || echo "sbatch exit $rc after $sb ms" >>"$work/probe.err"
    [ -n "$id" ] && timeout 30 scancel "${id%%;*}"
    echo "$(date +%s) $sq $sb $base" >>"$work/probe.txt"
    if [ $((i % 10)) = 0 ]; then
      timeout 30 sdiag 2>/dev/null | awk -v t="$(date +%s)" '/^Server thread count:/ { s = $4 } /^Agent queue size:/ { a = $4 } END { print t, s, a }' >>"$work/sdiag-samples.txt"
      # What the leak checks look for, while the jobs run: so a check that finds nothing at
      # the end is known to be able to see it (processes of jobs in the nodes' namespaces,
      # sockets of omni-* programs there, the jobs' directories in /tmp).
      seen_procs=$(for ns in $(grep -v -- -ctl "$work/ns-cluster.txt"); do ns_procs "$ns"; done | awk '{ print $2 }' | grep -cvxF -f "$work/daemons.txt")
      seen_socks=$(for ns in $(cat "$work/ns-cluster.txt"); do ns_sockets "$ns"; done | grep -c '"omni-')
      seen_dirs=$(listing | comm -13 "$work/files-before.txt" - | grep -c "^/tmp/omni-[0-9]*/job-$cluster-")
      echo "$seen_procs $seen_socks $seen_dirs" >>"$work/seen.txt"
    fi
    i=$((i + 1))
    # Once a second where the machine allows: the time this round took counts.
    t0=$(elapsed_ms "$t1")
    [ "$t0" -lt 1000 ] && sleep "$(( (1000 - t0) / 1000 )).$(printf '%03d' $(( (1000 - t0) % 1000 )))"
  done
}

sdiag --reset >/dev/null
start=$(date +%s)
end=$((start + minutes * 60))
: >"$work/actions.txt"; : >"$work/checked.txt"; : >"$work/elastic-jobs.txt"; : >"$work/probe.txt"
probe & pids+=($!)
ordinary & pids+=($!)
slot_pids=()
for k in $(seq "$n_jobs"); do slot "$k" & slot_pids+=($!); pids+=($!); sleep 2; done
note "load started at $(date -u +%T) UTC: $n_jobs elastic slots, ordinary jobs, probe; $minutes min"
for p in "${slot_pids[@]}"; do wait "$p" || bad "slot loop $p exited $?"; done
touch "$work/load-done"
wait "${pids[0]}" "${pids[1]}" || true
load_s=$(( $(date +%s) - start ))
# The ordinary jobs are at most 5 s long: the queue drains.
for _ in $(seq 120); do [ -z "$(squeue -h -o %i)" ] && break; sleep 0.5; done
sdiag >"$work/sdiag.txt"
# Elastic job-minutes: the time each elastic job (not its satellites) spent in Slurm.
for j in $(awk '{ print $2 }' "$work/elastic-jobs.txt"); do sacct -n -X -P -j "$j" -o ElapsedRaw | tail -n 1; done |
  awk '{ s += $1 } END { printf "%.2f\n", s / 60 }' >"$work/elastic-minutes.txt"
note "load ended after $load_s s"

# The RPCs of one elastic job left alone (no resize, no other job), which the load's count
# per job-minute mixes with the resizes', and of one `omni-ctl --job J status` (a step of the
# job as its user, as each of the soak's omni-ctl resizes is): sdiag reset around each window.
d=$u/idle
mkdir -p "$d" && chmod 0777 "$d"
cat >"$d/job.sh" <<EOS
#!/bin/bash
exec "$launch" --units 3 --events "$d/events.jsonl" -- "$demo" ${train/--steps $steps/--steps 100000} \
  --pace-ms $pace_ms --metrics "$d/metrics.jsonl"
EOS
chmod 0755 "$d/job.sh"
idle_s=${OMNI_SOAK_IDLE_S:-60}
ijob=$(cd "$d" && timeout 30 runuser -u nobody -- sbatch --parsable -N3 --ntasks-per-node=1 -t 10 \
  --omni-elastic=1:3 -J soak-idle -o "$d/job.out" "$d/job.sh")
ijob=${ijob%%;*}
if "$at_step" "$d/metrics.jsonl" 5 180 >/dev/null; then
  sleep 5
  sdiag --reset >/dev/null; t0=$(now_ms)
  sleep "$idle_s"
  sdiag >"$work/sdiag-idle.txt"; echo $(( $(now_ms) - t0 )) >"$work/idle-ms.txt"
  sdiag --reset >/dev/null; t0=$(now_ms)
  for _ in 1 2 3 4 5; do timeout 60 "$ctl" --job "$ijob" status >/dev/null 2>>"$work/ctl-calib.err" || bad "omni-ctl --job $ijob status failed: $(tail -n 1 "$work/ctl-calib.err")"; done
  sdiag >"$work/sdiag-ctl.txt"; echo $(( $(now_ms) - t0 )) >"$work/ctl-ms.txt"
else
  bad "the idle elastic job $ijob never trained: $(tail -n 3 "$d/job.out" | tr '\n' ' ')"
fi
timeout 30 scancel "$ijob" || true
for _ in $(seq 240); do [ -z "$(squeue -h -o %i)" ] && break; sleep 0.5; done
note "checking for leaks"

# --- Leaks, with every job ended.
# Each leak check's count, for the summary: "WHAT|COUNT".
leaks=$work/leaks.txt
echo "jobs left in squeue|$(squeue -h -o %i | wc -l)" >"$leaks"
echo "steps left in squeue|$(squeue -h -s -o %i | wc -l)" >>"$leaks"
[ -z "$(squeue -h -o '%i %u %j %T')" ] || bad "jobs left in squeue: $(squeue -h -o '%i %u %j %T' | tr '\n' ';')"
[ -z "$(squeue -h -s -o '%i %j')" ] || bad "steps left in squeue: $(squeue -h -s -o '%i %j' | tr '\n' ';')"
sleep 2   # slurmstepd and the jobs' processes go a moment after slurmctld forgets the job
for ns in $(cat "$work/ns-cluster.txt"); do
  ns_procs "$ns" | while read -r p c; do
    grep -qx "$c" "$work/daemons.txt" || echo "$ns: pid $p $c: $(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" | cut -c1-200)"
  done
done >"$work/leak-procs.txt"
# Anywhere on the machine: this build's programs, and Slurm clients or steps of this cluster.
for p in $(ls /proc | grep -E '^[0-9]+$'); do
  [ "$p" = $$ ] || [ "$p" = "$BASHPID" ] && continue
  cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline") || continue
  case "$cmd" in
    *"$top_build/launcher/"*) echo "pid $p: $(cut -c1-200 <<<"$cmd")" ;;
    srun*|*/srun*|salloc*|*/salloc*|slurmstepd*)
      tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "SLURM_CONF=$CLUSTER_DIR/etc/slurm.conf" &&
        echo "pid $p: $(cut -c1-200 <<<"$cmd")" ;;
  esac
done >>"$work/leak-procs.txt"
echo "processes left (job's, omni-*, srun/salloc/slurmstepd)|$(wc -l <"$work/leak-procs.txt")" >>"$leaks"
[ -s "$work/leak-procs.txt" ] && bad "processes left: $(head -n 5 "$work/leak-procs.txt" | tr '\n' ';')"
# TCP sockets in the cluster's namespaces: only the daemons' (slurmd, slurmctld, slurmdbd,
# munged, MariaDB); TIME-WAIT ones have no process and are no program's.
for ns in $(cat "$work/ns-cluster.txt"); do ns_sockets "$ns"; done >"$work/sockets-after.txt"
grep 'users:' "$work/sockets-after.txt" | grep -v -E 'users:\(\("(slurmd|slurmctld|slurmdbd|munged|mariadbd|mysqld)"' >"$work/leak-sockets.txt" || true
echo "TCP sockets left (not the daemons')|$(wc -l <"$work/leak-sockets.txt")" >>"$leaks"
[ -s "$work/leak-sockets.txt" ] && bad "sockets left: $(head -n 5 "$work/leak-sockets.txt" | tr '\n' ';')"
ns_list >"$work/ns-after.txt"
echo "namespaces beyond the cluster's $((n_nodes + 1))|$(comm -13 "$work/ns-cluster.txt" "$work/ns-after.txt" | wc -l)" >>"$leaks"
cmp -s "$work/ns-cluster.txt" "$work/ns-after.txt" || bad "namespaces changed: $(diff "$work/ns-cluster.txt" "$work/ns-after.txt" | tr '\n' ' ')"
# Files: the jobs' directories (/tmp/omni-UID/job-CLUSTER-J, removed by omni-launch), new
# files of the jobs' users in /tmp and /dev/shm, the nodes' TmpFS and the spool's job dirs.
{
  listing | comm -13 "$work/files-before.txt" - | grep -E "^/tmp/omni-[0-9]+/job-$cluster-" || true
  # Less the integration tests' work directories (this one's and other clusters' tests') and
  # the per-user parents of job directories, which other clusters' jobs share.
  listing | comm -13 "$work/files-before.txt" - | grep -v -E '^/tmp/omni-it-|^/tmp/omni-[0-9]+(/job-.*)?$' || true
  find "$CLUSTER_DIR/tmp" -mindepth 2 2>/dev/null
  find "$CLUSTER_DIR/spool" -mindepth 2 -maxdepth 2 -name 'job*' 2>/dev/null
} >"$work/leak-files.txt"
echo "files left (/tmp, /dev/shm, TmpFS, spool)|$(wc -l <"$work/leak-files.txt")" >>"$leaks"
[ -s "$work/leak-files.txt" ] && bad "files left: $(head -n 5 "$work/leak-files.txt" | tr '\n' ';')"

# --- Teardown, then nothing of the cluster may be left.
cluster_release
own_cluster=
sleep 1
echo "namespaces left after teardown|$(ns_list | wc -l)" >>"$leaks"
[ -z "$(ns_list)" ] || bad "namespaces left after teardown: $(ns_list | tr '\n' ' ')"
echo "bridge ob$base after teardown|$(ip link show "ob$base" >/dev/null 2>&1 && echo 1 || echo 0)" >>"$leaks"
ip link show "ob$base" >/dev/null 2>&1 && bad "bridge ob$base left after teardown"
left=$(for p in $(ls /proc | grep -E '^[0-9]+$'); do
  tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" | grep -qF -- "$CLUSTER_DIR" && echo "$p"; done | grep -vx -e $$ -e "$BASHPID" || true)
echo "processes of the cluster after teardown|$(printf '%s' "$left" | grep -c . || true)" >>"$leaks"
[ -z "$left" ] || bad "processes of the cluster after teardown: $left"

# --- The numbers.
/usr/bin/python3 - "$work" "$latency_limit_ms" "$load_s" "$n_jobs" "$minutes" "$ord_max" >"$work/summary.txt" <<'PY' || true
import json, math, os, re, sys
w, limit, load_s, n_jobs, minutes, ord_max = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
rows = []
def row(k, v, verdict=""): rows.append((k, str(v), verdict))
def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, math.ceil(p / 100 * len(xs)) - 1))] if xs else None
probe = [l.split() for l in open(os.path.join(w, "probe.txt")) if l.strip()]
sq = [int(p[1]) for p in probe]; sb = [int(p[2]) for p in probe]
bad = []
row("load", "%s elastic slots, %s min (%d s run)" % (n_jobs, minutes, load_s))
row("probes", len(probe))
base = [int(p[3]) for p in probe if len(p) > 3]
row("squeue --version ms worst / p99 / median (no RPC)", "%s / %s / %s" % (max(base) if base else None, pct(base, 99), pct(base, 50)))
for name, xs in (("squeue", sq), ("sbatch --hold", sb)):
    worst = max(xs) if xs else None
    v = "ok" if worst is not None and worst <= limit else "FAIL"
    if v == "FAIL": bad.append("%s worst %s ms > %d ms" % (name, worst, limit))
    row(name + " ms worst / p99 / median", "%s / %s / %s" % (worst, pct(xs, 99), pct(xs, 50)), v + " (limit %d)" % limit)
acts = [l.split() for l in open(os.path.join(w, "actions.txt")) if l.strip()]
for kind in ("scontrol", "grow", "shrink"):
    a = [x for x in acts if x[0] == kind]
    ms = [int(x[3]) for x in a if x[2] == "ok"]
    row("resizes %s ok/late/failed, ms median/max" % kind, "%d/%d/%d, %s/%s" % (
        sum(x[2] == "ok" for x in a), sum(x[2] == "late" for x in a), sum(x[2] == "failed" for x in a),
        pct(ms, 50), max(ms) if ms else None))
jobs = [l.split() for l in open(os.path.join(w, "elastic-jobs.txt")) if l.strip()]
checked = [l.split() for l in open(os.path.join(w, "checked.txt")) if l.strip()]
row("elastic jobs: run / equivalence ok", "%d / %d" % (len(jobs), len(checked)), "ok" if jobs and len(jobs) == len(checked) else "FAIL")
row("planned generation changes in checked jobs", sum(int(c[3]) for c in checked))
ords = [l for l in open(os.path.join(w, "ordinary.txt")) if l.strip()] if os.path.exists(os.path.join(w, "ordinary.txt")) else []
row("ordinary jobs submitted (max %s)" % ord_max, len(ords))
samples = [l.split() for l in open(os.path.join(w, "sdiag-samples.txt")) if len(l.split()) == 3]
if samples:
    row("server threads max (sampled /10 s)", max(int(s[1]) for s in samples))
    row("agent queue max (sampled /10 s)", max(int(s[2]) for s in samples))
sd = open(os.path.join(w, "sdiag.txt")).read()
def field(section, name):
    m = re.search(re.escape(section) + r".*?" + re.escape(name) + r":\s*(\d+)", sd, re.S)
    return int(m.group(1)) if m else None
row("sdiag server thread count (end)", re.search(r"^Server thread count:\s*(\d+)", sd, re.M).group(1))
for sec, label in (("Main schedule statistics", "main"), ("Backfilling stats", "backfill")):
    row("sdiag %s cycle us max / mean / cycles" % label, "%s / %s / %s" % (
        field(sec, "Max cycle"), field(sec, "Mean cycle"), field(sec, "Total cycles")))
types = re.findall(r"^\s*(\S+)\s*\(\s*\d+\)\s+count:(\d+)\s+ave_time:(\d+)\s+total_time:(\d+)", sd.split("by user")[0], re.M)
users = re.findall(r"^\s*(\S+)\s*\(\s*\d+\)\s+count:(\d+)\s+ave_time:(\d+)\s+total_time:(\d+)", sd.split("by user")[1], re.M) if "by user" in sd else []
total = sum(int(t[1]) for t in types)
row("RPCs total (since sdiag --reset)", total)
for name, count, ave, _ in users:
    row("RPCs of user %s, ave us" % name, "%s, %s" % (count, ave))
def by_user(path, user):
    if not os.path.exists(path): return None
    t = open(path).read()
    if "by user" not in t: return 0
    return sum(int(c) for n, c in re.findall(r"^\s*(\S+)\s*\(\s*\d+\)\s+count:(\d+)", t.split("by user")[1], re.M) if n == user)
# Elastic job-minutes: each elastic job's time in Slurm (sacct ElapsedRaw), read by the shell.
em = float(open(os.path.join(w, "elastic-minutes.txt")).read().strip() or 0)
nob = sum(int(c) for n, c, _, _ in users if n == "nobody")
ctl_calls = sum(1 for x in acts if x[0] in ("grow", "shrink"))
row("elastic job-minutes (sacct)", "%.1f" % em)
if em > 0:
    row("RPCs of the elastic jobs (user nobody) per job per minute", "%.1f" % (nob / em))
    idle = by_user(os.path.join(w, "sdiag-idle.txt"), "nobody")
    ctl = by_user(os.path.join(w, "sdiag-ctl.txt"), "nobody")
    if idle is not None and ctl is not None:
        idle_min = int(open(os.path.join(w, "idle-ms.txt")).read()) / 60000
        ctl_min = int(open(os.path.join(w, "ctl-ms.txt")).read()) / 60000
        idle_rate = idle / idle_min
        per_call = max(0.0, (ctl - idle_rate * ctl_min) / 5)
        row("  less the soak's %d omni-ctl --job calls (%.1f RPCs each)" % (ctl_calls, per_call),
            "%.1f" % ((nob - ctl_calls * per_call) / em))
        row("RPCs of one idle elastic job (3 units) per minute", "%.1f (%d in %.0f s)" % (idle_rate, idle, idle_min * 60))
        it = open(os.path.join(w, "sdiag-idle.txt")).read().split("by user")[0]
        for name, count in sorted(re.findall(r"^\s*(\S+)\s*\(\s*\d+\)\s+count:(\d+)", it, re.M), key=lambda t: -int(t[1]))[:6]:
            row("  idle window RPC %s (all users)" % name, count)
for name, count, ave, _ in sorted(types, key=lambda t: -int(t[1]))[:15]:
    row("  RPC %s, ave us" % name, "%s, %s" % (count, ave))
for l in open(os.path.join(w, "leaks.txt")):
    k, v = l.rstrip("\n").rsplit("|", 1)
    row("leak: " + k, v, "ok" if v.strip() == "0" else "FAIL")
seen = [[int(x) for x in l.split()] for l in open(os.path.join(w, "seen.txt")) if len(l.split()) == 3]
for i, what in enumerate(("job processes in the nodes' namespaces", "omni-* TCP sockets there", "job directories in /tmp")):
    m = max((x[i] for x in seen), default=0)
    row("seen during the load (max): " + what, m, "ok" if m > 0 else "FAIL")
    if m == 0: bad.append("the leak check for %s saw none even during the load" % what)
width = max(len(r[0]) for r in rows)
for k, v, verdict in rows:
    print("%-*s  %-28s %s" % (width, k, v, verdict))
for b in bad: print("FAIL:", b)
sys.exit(1 if bad else 0)
PY
cat "$work/summary.txt"
cp "$work/summary.txt" "$summary"
sed -n 's/^FAIL: //p' "$work/summary.txt" | while read -r l; do bad "$l"; done
if [ -s "$failures" ]; then
  { echo; echo "FAILURES:"; cat "$failures"; } | tee -a "$summary" >&2
  keep_failing
  echo "soak: failed; the jobs' logs are kept in $work (summary in $summary)" >&2
  exit 1
fi
note "ok: summary in $summary"
