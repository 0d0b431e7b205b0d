#!/usr/bin/env bash
# The elastic policy (--omni-policy=auto) under a flapping queue, on the local cluster (four
# hosts). omni-train-demo under omni-launch starts with 2 units of 1 rank on 2 exclusive
# nodes, --omni-elastic=1:4, with short thresholds (grow_after=2, shrink_after=2), cooldowns
# of 20 s (grow) and 30 s (shrink), and a look every second. Meanwhile a job of higher
# priority that needs 2 nodes is submitted and cancelled over and over (present 6 s, gone
# 3 s) until the policy has shrunk the job, for 120 s at most (where a grow falls on a flap
# and is withdrawn, the cooldowns push the shrink past a fixed window). Checked:
#  - the policy grows the job into the two idle nodes (a satellite job) and gives them back to
#    the waiting job of higher priority, which then starts on them: at least one grow and one
#    shrink, every change of kind "policy", one generation change per grow or shrink that
#    was not withdrawn;
#  - two policy resizes are never closer than the cooldown of the second, so there are at
#    most the resizes the cooldowns allow (a policy without them would resize twice every
#    9 s cycle);
#  - every decision is in the events file with its reason, and in omni-launch's log;
#  - per-step loss, LR and samples bitwise those of a static run of 4 units, every sample
#    once per epoch, no step trained twice; no satellite outlives the job.
. "$(dirname "$0")/lib.sh"
train_commands
cluster_acquire 4 0 netns
cd "$work"
# 10 steps per epoch (480 / 48); B = 48 with b = 4 allows d = 1..4 (GA = 12 / d).
train="--steps 700 --dataset-size 480 --lr 0.05 --warmup 5 --global-batch 48 --micro-batch 4"
grow_cd=20 shrink_cd=30
policy="auto,grow_after=2,shrink_after=2,grow_cooldown=$grow_cd,shrink_cooldown=$shrink_cd,interval=1"
flap_seconds=120

write_static_job static.sh 4 "$train"
mkdir -p "$work/samples"
elastic_job policy.sh policy "--units 2 --boundary-timeout 30" \
  "$train --pace-ms 200 --sample-log $work/samples" <<EOS
at_step 3 || exit 11
scontrol show job \$SLURM_JOB_ID | sed -n 's/^ *Priority=\([0-9]*\).*/job-priority \1/p'
# The flapping queue: a job of higher priority, of 2 exclusive nodes, comes and goes, until
# the policy has decided a shrink (and one more cycle, for the flapping job to start).
end=\$((SECONDS + $flap_seconds)) shrunk=0
while [ \$SECONDS -lt \$end ] && [ \$shrunk -lt 2 ]; do
  grep -q '"action": *"shrink"' "$work/policy-events.jsonl" && shrunk=\$((shrunk + 1))
  flap=\$(sbatch --parsable -p omni -N2 --exclusive --priority=4294967000 -J flap -t 2 -o /dev/null --wrap 'sleep 100')
  sleep 6
  echo "flap \$flap \$(squeue -h -j \$flap -o %T)"
  scancel \$flap
  sleep 3
done
EOS
out=$(timeout 300 sbatch --wait -N4 -t 5 -o "$work/static.out" --parsable static.sh) ||
  { cat "$work/static.out" >&2; fail "the static job failed"; }
job=$(timeout 600 sbatch --wait -N2 --exclusive --ntasks-per-node=1 -t 9 --omni-elastic=1:4 --omni-policy="$policy" \
  -o "$work/policy.out" --parsable policy.sh) ||
  { cat "$work/policy.out" >&2; fail "the job under the policy failed"; }
job=${job%%;*}
# Shown for the log only; '|| true': a job that printed none of these lines fails the checks below.
grep -E '^(flap|job-priority|launch-exit)|policy:|world [0-9]+ -> [0-9]+' "$work/policy.out" || true

expect_eq "omni-launch exit" "$(sed -n 's/^launch-exit //p' "$work/policy.out")" 0
expect_eq "job $job state" "$(job_state "$job")" COMPLETED
prio=$(sed -n 's/^job-priority //p' "$work/policy.out")
[ -n "$prio" ] && [ "$prio" -lt 4294967000 ] || fail "the job's priority '$prio' is not below the flapping job's"
grep -q "^flap [0-9]* RUNNING$" "$work/policy.out" ||
  fail "the job of higher priority never ran: the policy gave no nodes back (flap lines above)"
grep -q "policy: " "$work/policy.out" || fail "omni-launch logged no policy decision"

/usr/bin/python3 - "$work/policy-events.jsonl" "$grow_cd" "$shrink_cd" "$flap_seconds" <<'PY' || fail "the policy's decisions and resizes (above)"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
grow_cd, shrink_cd, flap = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
decisions = [l for l in lines if l.get("event") == "policy"]
acts = [d for d in decisions if d["action"] in ("grow", "shrink")]
# A grow withdrawn before it applied (its satellite had not started) changes no generation.
steps = [d["action"] for d in decisions if d["action"] != "none"]
withdrawn = sum(1 for a, b in zip(steps, steps[1:]) if (a, b) == ("grow", "withdraw"))
changes = [l for l in lines if l.get("event") is None and l["reason"] == "planned"]
for d in decisions:
    print("%s %-8s %d -> %d  %s" % (d["time"], d["action"], d["units"], d["target"], d["why"]))
bad = []
if not all(d["why"] for d in decisions): bad.append("a decision without its reason")
kinds = [d["action"] for d in acts]
if "grow" not in kinds or "shrink" not in kinds: bad.append("not one grow and one shrink: %s" % kinds)
for a, b in zip(acts, acts[1:]):
    cd = grow_cd if b["action"] == "grow" else shrink_cd
    gap = (b["unix_ms"] - a["unix_ms"]) / 1000
    if gap < cd: bad.append("%s %.1f s after the %s, below its cooldown %d s" % (b["action"], gap, a["action"], cd))
# Over the run, the cooldowns allow at most one resize per min(cooldown) after the first.
bound = 1 + (flap + 40) // min(grow_cd, shrink_cd)
if len(acts) > bound: bad.append("%d policy resizes, more than %d" % (len(acts), bound))
if [c.get("kind") for c in changes] != ["policy"] * len(changes):
    bad.append("changes not all of kind policy: %s" % [c.get("kind") for c in changes])
if len(changes) != len(acts) - withdrawn:
    bad.append("%d policy actions (%d grows withdrawn) but %d generation changes" % (len(acts), withdrawn, len(changes)))
if any(l.get("reason") == "lost" for l in lines): bad.append("a unit was lost")
print("%d policy resizes (%s), %d decisions logged" % (len(acts), " ".join(kinds), len(decisions)))
for b in bad: print("BAD:", b)
sys.exit(1 if bad else 0)
PY
same_training policy 700 480 10
if squeue -h --name "omni-sat-$job" -o %i | grep -q .; then fail "a satellite of job $job outlived it"; fi
note "ok: the policy grew and shrank the job within its cooldowns under a flapping queue, bitwise the static run"
