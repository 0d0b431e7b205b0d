#!/usr/bin/env bash
# Hostile values for every --omni-* option and every plugstack.conf argument, on a real
# cluster: huge (64 KiB), numbers past 64 bits, negative, non-ASCII, control characters,
# empty. Each is refused where it is given, with an "omni:" message that quotes a bounded
# piece of the value (never all 64 KiB; Slurm's own "Invalid ... argument" line after it
# echoes the whole value, which is Slurm's), and nothing is queued. The options also go
# straight to slurmstepd, past srun's own check, through the environment variables Slurm
# forwards SPANK options in (_SLURM_SPANK_OPTION_omni_*): the step fails with the plugin's
# message and runs nothing. Afterwards slurmctld and every slurmd still answer, and their
# logs hold no crash.
# With the quoting bound removed (common/parse.cc's quoted() showing the whole value, tried
# 2026-12-07) it fails: "plugstack.conf topology=<65536 bytes>: a message of 4111 bytes".
. "$(dirname "$0")/lib.sh"
cluster_acquire 2 0
grep -q '^required .*spank_omni.so' "$CLUSTER_DIR/etc/plugstack.conf" ||
  fail "the cluster does not load spank_omni.so ($(cat "$CLUSTER_DIR/etc/plugstack.conf"))"
cd "$work"
# The daemons' logs as they are now: only what is written during this test is searched for
# crashes below (the cluster may be shared with earlier tests).
for f in "$CLUSTER_DIR"/log/*.log; do echo "$f $(stat -c %s "$f")"; done >log-sizes

big=$(head -c 65536 /dev/zero | tr '\0' 'A')
digits=$(head -c 65536 /dev/zero | tr '\0' '7')
values=("$big" "$digits" "18446744073709551616" "-1" "-9223372036854775808" "é:ü" $'1\x01:4' $'4\t' "" "1:4,$big")
options=(omni-elastic omni-unit omni-mp omni-global-batch omni-micro-batch omni-sm-slice omni-ckpt omni-policy)
n=0
for o in "${options[@]}"; do
  for v in "${values[@]}"; do
    n=$((n + 1))
    name=omni-hostile-$$-$n
    extra=()
    # --omni-policy is checked against --omni-elastic's presence first; give it one.
    [ "$o" = omni-policy ] && extra=(--omni-elastic=1:2)
    rc=0
    timeout 30 sbatch --job-name="$name" "${extra[@]}" "--$o=$v" --wrap true >out 2>err || rc=$?
    [ $rc != 0 ] && [ $rc != 124 ] || fail "sbatch --$o=<${#v} bytes> was accepted or hung (rc $rc): $(head -c 300 out)"
    grep -q "omni: .*--$o" err || fail "sbatch --$o=<${#v} bytes>: no message naming the option: $(head -c 300 err)"
    [ "$(grep 'omni: ' err | wc -c)" -lt 2048 ] || fail "sbatch --$o=<${#v} bytes>: a message of $(grep 'omni: ' err | wc -c) bytes"
    [ -z "$(squeue -h -t all -n "$name")" ] || fail "sbatch --$o=<${#v} bytes> queued a job"
  done
done
note "$n hostile option values refused at submit, each message under 2 KiB, nothing queued"

# Past srun's check: the value as slurmstepd receives a SPANK option. Slurm forwards an
# option as _SLURM_SPANK_OPTION_<plugin>_<option>; set by hand, srun does not see it, so only
# the remote side can refuse it.
m=0
for o in "${options[@]}"; do
  var=_SLURM_SPANK_OPTION_omni_${o//-/_}
  for v in "$big" "18446744073709551616" "é:ü"; do
    m=$((m + 1))
    rc=0
    env "$var=$v" timeout 60 srun -N1 -n1 --job-name=omni-hostile-remote bash -c 'echo ran' >out 2>err || rc=$?
    [ $rc != 0 ] && [ $rc != 124 ] || fail "$var=<${#v} bytes>: the step ran or hung (rc $rc): $(head -c 300 out)"
    grep -q "^ran" out && fail "$var=<${#v} bytes>: the task ran"
    # slurmstepd's lines reach srun's stderr as "slurmstepd: error: ..." on 22.05 and as
    # "[TIMESTAMP] error: ..." on 26.05.5; either way not srun's own "srun: ..." lines.
    grep -qE "^(slurmstepd|\[[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+\] ).*omni: .*checked on node" err ||
      fail "$var=<${#v} bytes>: no message from the plugin in slurmstepd: $(head -c 300 err)"
  done
done
note "$m hostile values sent to slurmstepd directly: each step refused before its task ran"

# Hostile plugstack.conf arguments (sbatch reads plugstack.conf itself, through SLURM_CONF):
# the plugin refuses to load, naming the key, and sbatch submits nothing.
sed "s|^PlugStackConfig=.*|PlugStackConfig=$work/plugstack.conf|" "$SLURM_CONF" >slurm.conf
plug=$(awk '/^required/ {print $2}' "$CLUSTER_DIR/etc/plugstack.conf")
keys=(topology bind allow_sm_slice max_units default_domain policy policy_min_cooldown policy_min_interval grow)
k=0
for key in "${keys[@]}"; do
  for v in "$big" "$digits" "-1" "é" ""; do
    k=$((k + 1))
    printf 'required %s %s=%s\n' "$plug" "$key" "$v" >plugstack.conf
    rc=0
    SLURM_CONF=$work/slurm.conf timeout 30 sbatch --job-name=omni-hostile-plug-$$ --wrap true >out 2>err || rc=$?
    [ $rc != 0 ] && [ $rc != 124 ] || fail "plugstack.conf $key=<${#v} bytes>: sbatch ran or hung (rc $rc)"
    grep -q "omni: plugstack.conf: .*$key" err || fail "plugstack.conf $key=<${#v} bytes>: the key is not named: $(head -c 300 err)"
    [ "$(grep 'omni: ' err | wc -c)" -lt 2048 ] || fail "plugstack.conf $key=<${#v} bytes>: a message of $(grep 'omni: ' err | wc -c) bytes"
  done
done
[ -z "$(squeue -h -t all -n "omni-hostile-plug-$$")" ] || fail "a job was queued under a hostile plugstack.conf"
note "$k hostile plugstack.conf arguments refused, the key named"

# The daemons are alive and well: slurmctld answers, every node is idle (no slurmd down or
# drained), and no daemon's log records a crash.
scontrol ping | grep -q 'is UP' || fail "slurmctld does not answer: $(scontrol ping)"
# No match is the pass case (every node well); the list is checked just below.
bad_nodes=$(sinfo -h -N -p omni -o '%N %T' | grep -Ei 'down|drain|fail|unk|not_responding' || true)
[ -z "$bad_nodes" ] || fail "nodes not well after the hostile input: $bad_nodes"
while read -r f size; do
  tail -c +"$((size + 1))" "$f" | grep -E 'Segmentation fault|SIGSEGV|SIGABRT|fatal:|double free|stack smashing' &&
    fail "$f records a crash during this test (above)"
done <log-sizes
expect_eq "a job after all that" "$(srun -N2 -n2 --omni-elastic=1:2 printenv OMNI_ELASTIC_MAX | sort -u)" 2
note "ok: slurmctld and both slurmd alive, no crash in their logs"
