#!/usr/bin/env bash
# Hostile users and input (issue 46) on a netns cluster (every node its own host): an elastic
# job of root's trains 3 units on n1..n3 (coordinator on n1, reshaped 3 -> 2 -> 3) while
#  - from n4, a host outside the job, raw TCP goes to the coordinator's port: garbage and a
#    frame announcing 1 GiB are closed within 1 s, half a greeting then silence within
#    4.5..6.5 s (the 5 s handshake deadline), 200 idle connections are all closed within
#    6.5 s; the owner's own omni-ctl, relayed through n4 and recorded there, has its last
#    frame injected into its own connection (closed within 1 s) and everything it sent
#    replayed on a new connection (closed within 1.5 s); the coordinator logs the refusals,
#    the deadline and the cap's drops naming n4, and grows by less than 32 MiB;
#  - from n4 too, every port a rank of ours listens on (only a Gloo pair's, while a reshape
#    builds its communicator: OMNI_GLOO_TEST_HOLD_MS=3000 keeps each pair listening 3 s
#    after the rendezvous, so each is reached; while the job trains no rank listens at all)
#    gets garbage, a Gloo frame header announcing 1 GiB (each closed within 1 s), half a
#    token then silence (closed within 2.6 s: the pairs' 2 s deadline, or the pair connecting)
#    and 20 idle connections (all closed within 3 s, at most 8 held); each rank logs the
#    refusals naming n4, and the reshapes go on (comm/gloo_guard.h); with Gloo from 2023-05
#    on (Slurm 24.11's Debian 13, 26.05's sid) the pairs listen on doors of their own and
#    Gloo's device listener is closed as soon as a rank's communicator is made;
#  - a second Unix user, created here, cannot read the job secret or the job directory, is
#    refused by the coordinator with a guessed secret, by omni-ctl --job, and as a satellite
#    of the job (omni-launch --satellite without the secret, and an sbatch of theirs with a
#    guessed one);
#  - checkpoints follow the owner's umask: 077 gives 0600 files and 0700 directories (the
#    elastic job), 022 gives 0644 and 0755 (the static job);
# and the elastic job ends with the static run's losses, step for step, bitwise, every sample
# once per epoch (same-steps.py, exactly-once.py).
#
# How it fails with a protection removed: each protection of the coordinator was removed
# once under launcher/coord/test/hostile_test.cc, which runs the same attacks on 127.0.0.1
# (2026-12-06; see there): with PLAIN instead of CURVE the replays are executed and the
# connections stay open; without the handshake deadline "half" stays open past 6.5 s (so
# here: "half: not closed"); without the cap the log has no "dropped the connection from"
# line; without ZMQ_MAXMSGSIZE "huge" stays open. Tried here: with the job directory 0755 and
# the secret 0644 the mode check fails (the secret stays unreadable all the same: the
# parent, /tmp/omni-0, is 0700). Tried without the pairs' guard (make_guarded_context
# returning Gloo's own context, 2026-12-06): a survivor's pair took n4's garbage as its peer
# in the 3 -> 2 reshape (the next attack on that port was refused: Gloo had closed the
# listener), the build failed ("gloo allgather ... Connection closed by peer"), the job
# stopped below its minimum at step 17 and this test failed with "the elastic job failed".
. "$(dirname "$0")/lib.sh"
train_commands
cluster_acquire 4 0 netns
cd "$work"
[ "$CLUSTER_HOSTS" = netns ] || skip "needs a netns cluster (OMNI_TEST_CLUSTER is $CLUSTER_HOSTS)"
base=$(sed -n 's/^PORT_BASE=//p' "$CLUSTER_DIR/cluster.env")
in_ns() { local n=$1; shift; nsenter --net="/run/netns/omni$base-$n" "$@"; }
tcp=$top_src/tests/integration/hostile-tcp.py

# The second user: made here, removed at exit with whatever it owns.
user=omnih$$
useradd -M -N -d /nonexistent -s /usr/sbin/nologin "$user" || fail "useradd $user"
bg=()
jobdirs=()
cleanup() {
  local p
  # '|| true': a probe may have ended already.
  for p in "${bg[@]}"; do kill "$p" 2>/dev/null || true; done
  scancel -u "$user" 2>/dev/null || true
  userdel "$user" 2>/dev/null || true
  cluster_release
  # omni-launch removes the secret and the endpoint at exit, not the directory it writes
  # its events into; nothing of this test's jobs stays behind.
  for p in "${jobdirs[@]}"; do rm -rf "$p"; done
  cleanup_work
}
trap cleanup EXIT
as() { runuser -u "$user" -- "$@"; }
u=$work/user
mkdir -p "$u" && chmod 0777 "$u"

# 20 steps per epoch (480 / 24), 3 epochs; B = 24 with b = 4 divides b*d for d = 2, 3.
schedule="--steps 60 --dataset-size 480 --lr 0.05 --warmup 5"
cat >static.sh <<EOS
#!/bin/bash
umask 022
exec "$launch" --units 3 --events "$work/static-events.jsonl" -- "$demo" $schedule \
  --global-batch 24 --micro-batch 4 --ckpt "$work/static-ckpt" --ckpt-every 20 --metrics "$work/static.jsonl"
EOS
chmod +x static.sh
elastic_job elastic.sh elastic "--units 3 --boundary-timeout 30" \
  "$schedule --pace-ms 300 --sample-log $work/samples --ckpt $work/elastic-ckpt --ckpt-every 20" <<EOS
at_step 15 || exit 11
"$ctl" reshape --units 2 || exit 12
at_step 35 && "$ctl" reshape --units 3 || exit 13
EOS
sed -i '2a umask 077\nexport OMNI_GLOO_TEST_HOLD_MS=3000' elastic.sh
mkdir -p "$work/samples"
# Job ids are unique per cluster only: other clusters on this machine have jobs of these ids.
cluster=$(scontrol show config | awk '$1 == "ClusterName" { print $3 }')
[ -n "$cluster" ] || fail "no ClusterName"
static_job=$(timeout 120 sbatch --wait -w n1,n2,n3 -t 5 -o "$work/static.out" --parsable static.sh) ||
  { cat "$work/static.out" >&2; fail "the static job failed"; }
jobdirs+=("/tmp/omni-0/job-$cluster-${static_job%%;*}")
job=$(sbatch --parsable -w n1,n2,n3 -t 5 --omni-elastic=2:3 --omni-global-batch=24 --omni-micro-batch=4 \
      -o "$work/elastic.out" elastic.sh) || fail "sbatch of the elastic job"
job=${job%%;*}
jobdirs+=("/tmp/omni-0/job-$cluster-$job")
"$at_step" "$work/elastic.jsonl" 3 60 || { cat "$work/elastic.out" >&2; fail "job $job never trained"; }
jobdir=/tmp/omni-0/job-$cluster-$job
[ -s "$jobdir/coordinator" ] || fail "no job directory $jobdir"
endpoint=$(cat "$jobdir/coordinator")
hostport=${endpoint#tcp://}
cip=${hostport%:*} cport=${hostport##*:}
expect_eq "the coordinator's host" "$cip" "$(node_addr n1)"
attacker=$(node_addr n4)
note "job $job: coordinator $endpoint; attacks from n4 ($attacker)"
coord_pid=$(in_ns n1 ss -Htlnp "sport = :$cport" | grep -o 'pid=[0-9]*' | head -n 1 | cut -d= -f2)
[ -n "$coord_pid" ] || fail "no process listens on $endpoint"
rss() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
rss_before=$(rss "$coord_pid")
# While the job trains, no rank of ours listens (Gloo's pairs listen only while built).
for n in n1 n2 n3; do
  l=$(in_ns "$n" ss -Htlnp 2>/dev/null | awk '/"omni-train-demo"/ && !/"slurmstepd"/ { print $4 }')
  [ -z "$l" ] || fail "a rank on $n listens on $l while the job trains"
done

# The attacks, from n4, in the background while the job trains.
HOSTILE_LIMIT_S=8 in_ns n4 /usr/bin/python3 "$tcp" "$cip" "$cport" garbage huge half idle:200 >attacks.txt 2>&1 &
bg+=($!)
lport=$((20000 + $$ % 10000))
HOSTILE_LISTEN=$attacker HOSTILE_LIMIT_S=3 in_ns n4 /usr/bin/python3 "$tcp" "$cip" "$cport" "replay:$lport" >replay.txt 2>&1 &
bg+=($!)
for _ in $(seq 50); do grep -q "relay listening" replay.txt && break; sleep 0.1; done
in_ns n4 env OMNI_COORD_SECRET="$(cat "$jobdir/secret")" "$ctl" --address "tcp://$attacker:$lport" status \
  >relayed-status.out 2>&1 || fail "the owner's omni-ctl through the relay: $(cat relayed-status.out)"
# Every port a rank of ours listens on while the job runs (Gloo pairs listen on the node's
# address while a communicator is built, until their peer connects), attacked from n4 as
# soon as it is seen (polled every 50 ms), three attackers at once so that all land within
# the 3 s hold. Sockets slurmstepd holds too are Slurm's (mpi/pmix's listener on 0.0.0.0,
# inherited by tasks; lib.sh check_sockets), not ours.
watch_ranks() {
  local seen=" " n l
  while [ -n "$(squeue -h -j "$job" -t R -o %i)" ]; do
    for n in n1 n2 n3; do
      for l in $(in_ns "$n" ss -Htlnp 2>/dev/null | awk '/"omni-train-demo"/ && !/"slurmstepd"/ { print $4 }'); do
        case "$seen" in *" $n/$l "*) continue ;; esac
        seen="$seen$n/$l "
        echo "$n $l $(date +%s.%N)" >>rank-listeners.txt
        HOSTILE_LIMIT_S=6 in_ns n4 /usr/bin/python3 "$tcp" "${l%:*}" "${l##*:}" garbage gloo-huge >>ranks.txt 2>&1 &
        HOSTILE_LIMIT_S=6 in_ns n4 /usr/bin/python3 "$tcp" "${l%:*}" "${l##*:}" half >>ranks.txt 2>&1 &
        HOSTILE_LIMIT_S=6 in_ns n4 /usr/bin/python3 "$tcp" "${l%:*}" "${l##*:}" idle:20 >>ranks.txt 2>&1 &
      done
    done
    sleep 0.05
  done
  wait
}
watch_ranks &
bg+=($!)

# The second user, meanwhile.
rc=0; as cat "$jobdir/secret" >/dev/null 2>"$u/secret.err" || rc=$?
[ $rc != 0 ] || fail "$user read the job secret"
expect_eq "the job directory's mode" "$(stat -c %a "$jobdir")" 700
rc=0; as ls "$jobdir" >/dev/null 2>&1 || rc=$?
[ $rc != 0 ] || fail "$user listed the job directory"
guess=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
rc=0; as env OMNI_COORD_SECRET="$guess" timeout 30 "$ctl" --address "$endpoint" status >"$u/guess.out" 2>&1 || rc=$?
expect_eq "omni-ctl with a guessed secret: exit" "$rc" 1
grep -q "refused" "$u/guess.out" || fail "a guessed secret: $(cat "$u/guess.out")"
rc=0; as timeout 30 "$ctl" --job "$job" status >"$u/job.out" 2>&1 || rc=$?
expect_eq "omni-ctl --job as $user: exit" "$rc" 1
grep -q "job $job belongs to root (uid 0): only its owner and root may ask its coordinator" "$u/job.out" ||
  fail "omni-ctl --job as $user: $(cat "$u/job.out")"
# Joining a satellite: without the secret (the job directory is closed to them), then with
# a guessed one in an sbatch of their own on n4, as omni-launch would start a satellite.
rc=0; as env OMNI_JOB_DIR="$jobdir" OMNI_SATELLITE_UNITS=3 OMNI_UNIT_SIZE=1 OMNI_SATELLITE_OF="$job" \
  timeout 30 "$launch" --satellite -- "$demo" >"$u/sat-nosecret.out" 2>&1 || rc=$?
[ $rc != 0 ] || fail "a satellite without the secret ran: $(cat "$u/sat-nosecret.out")"
grep -qi "permission denied" "$u/sat-nosecret.out" || fail "a satellite without the secret: $(cat "$u/sat-nosecret.out")"
cat >"$u/sat.sh" <<EOS
#!/bin/bash
exec "$launch" --satellite -- "$demo" $schedule --global-batch 24 --micro-batch 4 --metrics "$u/sat.jsonl"
EOS
chmod 0755 "$u/sat.sh"
rc=0; as env OMNI_COORD_ADDR="$endpoint" OMNI_COORD_SECRET="$guess" OMNI_SATELLITE_UNITS=3 OMNI_UNIT_SIZE=1 \
  OMNI_SATELLITE_OF="$job" timeout 60 sbatch --wait -w n4 -N1 -t 2 -o "$u/sat.out" \
  --chdir "$u" "$u/sat.sh" >/dev/null 2>&1 || rc=$?
[ $rc != 0 ] || fail "$user's satellite of job $job succeeded: $(cat "$u/sat.out")"
grep -q "refused" "$u/sat.out" || fail "$user's satellite: $(tail -n 5 "$u/sat.out")"
[ ! -s "$u/sat.jsonl" ] || fail "$user's satellite trained: $(head -n 2 "$u/sat.jsonl")"
note "$user: secret and job directory unreadable, refused with a guessed secret, by --job and as a satellite"

wait "${bg[0]}" "${bg[1]}" || true
rss_after=$(rss "$coord_pid")
[ -n "$rss_before" ] && [ -n "$rss_after" ] || fail "the coordinator (pid $coord_pid) ended during the attacks"
cat attacks.txt replay.txt
# closed_within NAME FILE MAX [MIN]: the attack NAME's connection was closed within MAX s.
closed_within() {
  local t
  t=$(awk -v n="$1" '$1 == n && $2 == "closed-after" { print $3 }' "$2")
  [ -n "$t" ] || fail "$1: not closed ($(grep "^$1 " "$2" || echo 'no result'))"
  awk -v t="$t" -v max="$3" -v min="${4:-0}" 'BEGIN { exit !(t <= max && t >= min) }' ||
    fail "$1: closed after $t s, not within ${4:-0}..$3 s"
}
closed_within garbage attacks.txt 1
closed_within huge attacks.txt 1
closed_within half attacks.txt 6.5 4.5
read -r _ n _ connected _ refused _ closed _ last <<<"$(grep '^idle ' attacks.txt)"
expect_eq "idle connections closed" "$closed" "$connected"
awk -v t="$last" 'BEGIN { exit !(t >= 0 && t <= 6.5) }' || fail "idle: the last closed after $last s"
closed_within replay-same-connection replay.txt 1
closed_within replay-new-connection replay.txt 1.5
grep -q "refused a connection from $attacker:[0-9]*: " "$work/elastic.out" ||
  fail "no refusal naming n4 ($attacker) in the coordinator's log"
grep -q "dropped the connection from $attacker:[0-9]* after" "$work/elastic.out" ||
  fail "the cap on unfinished handshakes dropped nothing"
grep -q "refused a connection from $attacker:[0-9]*: no handshake within 5000 ms" "$work/elastic.out" ||
  fail "no handshake deadline in the coordinator's log"
note "coordinator RSS ${rss_before} -> ${rss_after} KiB during the attacks"
[ $((rss_after - rss_before)) -lt 32768 ] || fail "the coordinator grew by $((rss_after - rss_before)) KiB"

# The job went on: it finishes with the static run's results.
for _ in $(seq 900); do [ -z "$(squeue -h -j "$job" -t PD,R,CG -o %i)" ] && break; sleep 0.1; done
wait "${bg[2]}" || true
bg=()
listeners=$(cat rank-listeners.txt 2>/dev/null | wc -l)
note "ports ranks of ours listened on, each attacked from n4: $listeners"
cat ranks.txt 2>/dev/null || true
grep -q "^launch-exit 0" "$work/elastic.out" || { tail -n 20 "$work/elastic.out" >&2; fail "the elastic job failed"; }
# The pairs' guard: each answer within its bound; "refused" is the kernel's (the pair had
# connected and stopped listening). The reshapes 3 -> 2 and 2 -> 3 build 2 + 6 listeners.
[ "$listeners" -ge 4 ] || fail "only $listeners rank listeners seen (the reshapes build 8)"
awk '
  $2 == "open" { print "still open: " $0; bad = 1 }
  ($1 == "garbage" || $1 == "gloo-huge") && $2 == "closed-after" { n++; if ($3 > 1) { print "late: " $0; bad = 1 } }
  $1 == "half" && $2 == "closed-after" && $3 > 2.6 { print "late: " $0; bad = 1 }
  $1 == "idle" && ($8 != $4 || ($4 > 0 && ($10 < 0 || $10 > 3))) { print "idle: " $0; bad = 1 }
  END { if (n < 4) { print "only " n + 0 " garbage/gloo-huge attacks reached a listener"; bad = 1 } exit bad }
' ranks.txt || fail "attacks on the ranks' Gloo listeners"
grep -q "refused a Gloo pair connection from $attacker:[0-9]*: wrong token" "$work/elastic.out" ||
  fail "no rank logged a refused Gloo pair connection from n4"
grep -q "refused a Gloo pair connection from $attacker:[0-9]*: no token within 2000 ms" "$work/elastic.out" ||
  fail "no rank logged the pairs' token deadline"
planned_worlds elastic 3 2 3
same_training elastic 60 480 20

# Checkpoints follow the owner's umask.
modes() { find "$1" -mindepth 1 -type "$2" -printf '%m\n' | sort -u | xargs; }
[ -n "$(modes "$work/elastic-ckpt" f)" ] || fail "the elastic job wrote no checkpoint"
expect_eq "checkpoint files under umask 077" "$(modes "$work/elastic-ckpt" f)" 600
expect_eq "checkpoint directories under umask 077" "$(modes "$work/elastic-ckpt" d)" 700
expect_eq "checkpoint files under umask 022" "$(modes "$work/static-ckpt" f)" 644
expect_eq "checkpoint directories under umask 022" "$(modes "$work/static-ckpt" d)" 755
f=$(find "$work/elastic-ckpt" -type f | head -n 1)
rc=0; as cat "$f" >/dev/null 2>&1 || rc=$?
[ $rc != 0 ] || fail "$user read $f"
note "ok: attacks bounded and logged, $user kept out, checkpoints by umask, the job trained as the static run"
