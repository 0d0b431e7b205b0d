#!/usr/bin/env bash
# omni-ctl --job J from outside the job, on the local cluster (3 nodes): a job of user nobody trains
# 2 units on 2 whole nodes under omni-launch, and this script (root, outside every job) asks its
# coordinator through Slurm, which runs omni-ctl as a step of the job on its batch host:
#  - its owner gets `status --json` with the documented fields, and `shrink --units 1` gives
#    a node back (scontrol then lists one node); root gets `status` and grows it back with
#    `grow --units 2` (a satellite job of nobody's on the node given back); the events show
#    2 -> 1 -> 2, planned;
#  - another user (daemon) is refused with a message naming the owner, before any step;
#  - bad input: an unknown job, a pending job, a job that runs no omni-launch, a malformed
#    job id, --job with --address: clear errors, exit 1 (2 for bad usage), the job untouched.
. "$(dirname "$0")/lib.sh"
train_commands
cluster_acquire 3 0
cd "$work"
u=$work/nobody
mkdir -p "$u" && chmod 0777 "$u"
id nobody >/dev/null && id daemon >/dev/null || skip "needs the users nobody and daemon (Debian's base passwd)"
as() { runuser -u "$1" -- "${@:2}"; }
# nobody's sbatch loads the plugins from the build tree (PluginDir, plugstack.conf) and its job
# runs omni-launch from there: a tree under a 0700 directory (a home, /root) cannot be used.
for f in "$launch" "$demo" "$ctl" "$(sed -n 's/^required \([^ ]*\).*/\1/p' "$CLUSTER_DIR/etc/plugstack.conf")"; do
  [ -z "$f" ] || as nobody test -r "$f" ||
    skip "user nobody cannot read $f: the build tree must be reachable by other users (chmod o+x on the directories above it)"
done
cat >"$u/job.sh" <<EOS
#!/bin/bash
exec "$launch" --units 2 --events "$u/events.jsonl" -- "$demo" --steps 400 --dataset-size 960 \
  --global-batch 64 --micro-batch 4 --pace-ms 100 --metrics "$u/metrics.jsonl"
EOS
chmod 0755 "$u/job.sh"
job=$(as nobody sbatch --parsable -N2 --exclusive --ntasks-per-node=1 -t 5 --omni-elastic=1:4 -o "$u/job.out" --chdir "$u" "$u/job.sh")
job=${job%%;*}
"$at_step" "$u/metrics.jsonl" 5 60 || { cat "$u/job.out" >&2; fail "job $job never trained"; }

# The owner, from outside the job.
as nobody "$ctl" --job "$job" status --json >"$work/owner-status.json" 2>"$work/owner-status.err" ||
  fail "omni-ctl --job $job status as its owner: $(cat "$work/owner-status.err")"
/usr/bin/python3 - "$work/owner-status.json" "$top_src/man/omni-ctl.1" <<'PY' || fail "the owner's status (above)"
import json, re, sys
s = json.load(open(sys.argv[1]))
# The fields omni-ctl(1) lists for status --json, read from the man page itself.
man = open(sys.argv[2]).read()
block = man[man.index("the same as one JSON object (fields"):man.index("is the pause of the change")]
# The names on its .IR lines, without what parentheses say of a field (its own fields).
listed = re.sub(r'\([^)]*\)', '', " ".join(l[4:] for l in block.splitlines() if l.startswith(".IR ")))
documented = set(re.findall(r'\b([a-z_]+)\b', listed))
assert set(s) == documented, (sorted(set(s) - documented), sorted(documented - set(s)))
assert s["phase"] == "running" and s["units"] == 2, s
assert sorted(m["node"] for m in s["members"]) == ["n1", "n2"], s["members"]
print("ok: status --json from outside the job, fields as documented:", len(documented))
PY
as nobody "$ctl" --job "$job" shrink --units 1 --wait 60 >"$work/shrink.out" 2>&1 ||
  fail "omni-ctl --job $job shrink as its owner: $(cat "$work/shrink.out")"
grep -q "^released n" "$work/shrink.out" || fail "the shrink released no node: $(cat "$work/shrink.out")"
expect_eq "the job's nodes after the shrink" "$(scontrol show job "$job" | sed -n 's/^ *NumNodes=\([0-9]*\) .*/\1/p')" 1

# root.
"$ctl" --job "$job" status >"$work/root-status.out" 2>&1 || fail "omni-ctl --job $job status as root: $(cat "$work/root-status.out")"
grep -q "^units: *1 " "$work/root-status.out" || fail "root's status: $(cat "$work/root-status.out")"
"$ctl" --job "$job" grow --units 2 --wait 60 >"$work/grow.out" 2>&1 ||
  fail "omni-ctl --job $job grow as root: $(cat "$work/grow.out")"

# Anyone else, and bad input.
rc=0; as daemon "$ctl" --job "$job" status >"$work/other.out" 2>&1 || rc=$?
expect_eq "omni-ctl --job as another user: exit" "$rc" 1
grep -q "job $job belongs to nobody (uid $(id -u nobody)): only its owner and root may ask its coordinator" \
  "$work/other.out" || fail "another user: $(cat "$work/other.out")"
rc=0; "$ctl" --job 999999 status >"$work/unknown.out" 2>&1 || rc=$?
expect_eq "omni-ctl --job of an unknown job: exit" "$rc" 1
grep -q "omni-ctl: job 999999: reading job 999999 from Slurm" "$work/unknown.out" || fail "unknown job: $(cat "$work/unknown.out")"
held=$(sbatch --parsable --hold -N1 -o /dev/null --wrap true)
rc=0; "$ctl" --job "${held%%;*}" status >"$work/held.out" 2>&1 || rc=$?
scancel "${held%%;*}"
expect_eq "omni-ctl --job of a pending job: exit" "$rc" 1
grep -q "it is PENDING, not running" "$work/held.out" || fail "pending job: $(cat "$work/held.out")"
plain=$(sbatch --parsable -N1 -o /dev/null --wrap 'sleep 30')
for _ in $(seq 100); do [ "$(squeue -h -j "${plain%%;*}" -o %T)" = RUNNING ] && break; sleep 0.1; done
rc=0; "$ctl" --job "${plain%%;*}" status >"$work/plain.out" 2>&1 || rc=$?
scancel "${plain%%;*}"
expect_eq "omni-ctl --job of a job without omni-launch: exit" "$rc" 1
grep -q "is omni-launch running in this job?" "$work/plain.out" || fail "plain job: $(cat "$work/plain.out")"
rc=0; "$ctl" --job 12x status >"$work/bad.out" 2>&1 || rc=$?
expect_eq "omni-ctl --job 12x: exit" "$rc" 2
rc=0; "$ctl" --job "$job" --address tcp://127.0.0.1:1 status >"$work/bad2.out" 2>&1 || rc=$?
expect_eq "omni-ctl --job with --address: exit" "$rc" 2

# The job went on and finished: 2 -> 1 -> 2, planned, nothing lost.
for _ in $(seq 900); do [ -z "$(squeue -h -j "$job" -t PD,R,CG -o %i)" ] && break; sleep 0.1; done
# A resized job has a record per size in accounting.
expect_eq "job $job's exit codes" "$(sacct -n -X -j "$job" -o ExitCode | sort -u | xargs)" 0:0
/usr/bin/python3 - "$u/events.jsonl" <<'PY' || fail "the job's events (above)"
import json, sys
got = [(e["reason"], e["old_world"], e["new_world"]) for e in map(json.loads, open(sys.argv[1]))]
assert got[:3] == [("initial", 0, 2), ("planned", 2, 1), ("planned", 1, 2)], got
assert not any(r == "lost" for r, _, _ in got), got
print("ok: events", got)
PY
note "ok: omni-ctl --job $job from outside: owner status/shrink, root status/grow, another user refused"
