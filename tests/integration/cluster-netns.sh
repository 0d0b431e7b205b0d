#!/usr/bin/env bash
# omni-cluster --hosts netns: every node its own host. Four nodes have four hostnames and four
# addresses; the controller is a host of its own; none of the cluster's daemons listens in
# this machine's namespace; down leaves no namespace, link, daemon or mount; an 'up' after a
# crash cleans what the crash left; a bad --hosts is refused (exit 2) before anything is made.
. "$(dirname "$0")/lib.sh"
need_root
dir=$work/cluster
# At exit, whatever happened: stop the cluster (its own errors are not this test's result).
trap '"$omni_cluster" --dir "$dir" down >/dev/null 2>&1 || true; cleanup_work' EXIT

# What the cluster made on this machine, by the names down must remove (P: the port base).
leftovers() {  # leftovers P; '|| true': grep finding nothing (exit 1) is the good case
  ip netns list 2>/dev/null | awk '{ print "netns " $1 }' | grep -E "^netns omni$1-" || true
  ip -o link show 2>/dev/null | awk -F': ' '{ print "link " $2 }' | grep -E "^link (ob$1|ov$1[^ ]*)" || true
  local p
  for p in /proc/[0-9]*; do
    tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qxF "OMNI_CLUSTER_DAEMON_OF=$dir" && echo "process ${p#/proc/}"
  done
  return 0
}

# Bad values: exit 2, the usage, nothing made.
for bad in "" bogus NETNS "netns extra"; do
  rc=0
  "$omni_cluster" --dir "$dir" up --hosts "$bad" >"$work/out" 2>"$work/err" || rc=$?
  expect_eq "exit of up --hosts '$bad'" "$rc" 2
  grep -q '^Usage: ' "$work/err" || fail "up --hosts '$bad': no usage on stderr"
  [ ! -e "$dir" ] || fail "up --hosts '$bad' made $dir"
done
grep -qF -- "--hosts 'netns extra': expected local or netns" "$work/err" ||
  fail "the refusal does not name the value: $(head -1 "$work/err")"
rc=0; "$omni_cluster" --dir "$dir" status --hosts netns >/dev/null 2>&1 || rc=$?
expect_eq "exit of status --hosts netns (an option of up)" "$rc" 2

run_before=0; [ -d /run/netns ] && run_before=1
"$omni_cluster" --dir "$dir" up --hosts netns --nodes 4 --build-dir "$top_build" >"$work/up.out" ||
  fail "up --hosts netns --nodes 4 failed: $(cat "$work/up.out")"
eval "$("$omni_cluster" --dir "$dir" env)"
base=$(sed -n 's/^PORT_BASE=//p' "$dir/cluster.env")
net=198.18.$((base / 100 % 256))

expect_eq "srun -N4 hostname" "$(srun -N4 hostname | sort | tr '\n' ' ')" "n1 n2 n3 n4 "
expect_eq "srun -N4: global IPv4 addresses" \
  "$(srun -N4 ip -4 -o addr show scope global | awk '{ print $4 }' | sort -t. -k4n | tr '\n' ' ')" \
  "$net.11/24 $net.12/24 $net.13/24 $net.14/24 "
expect_eq "NodeAddr of n3" "$(node_addr n3)" "$net.13"
expect_eq "the controller" "$(scontrol ping | grep -o 'Slurmctld(primary) at [^ ]*')" "Slurmctld(primary) at ctl"
# The controller runs in its own host, the nodes in theirs: none of this cluster's daemons
# listens here (another cluster, in local mode, may).
ours=$(cat "$dir"/run/*.pid | tr -dc '0-9\n' | sed 's/^/pid=/; s/$/,/' | paste -sd'|')
[ -n "$ours" ] || fail "no pid files in $dir/run"
# grep -c prints 0 and exits 1 when nothing matches: that is the expected answer.
expect_eq "this cluster's daemons listening in this machine's namespace" \
  "$(ss -Htlnp | grep -cE "$ours" || true)" 0
# ... and there they do: slurmctld in the controller's namespace.
nsenter --net="/run/netns/omni$base-ctl" ss -Htlnp | grep -qE "pid=$(tr -dc 0-9 <"$dir/run/slurmctld.pid")," ||
  fail "slurmctld does not listen in ctl's namespace omni$base-ctl"
# PMIx wire-up across hosts, where this Slurm has mpi/pmix. Without it (Debian unstable's
# 26.05.5) ranks meet across netns hosts through the coordinator and Gloo instead:
# launch-no-pmix.sh checks that route on a netns cluster.
if slurm_has_pmix; then
  out=$(srun -N2 -n4 --mpi=pmix "$top_build/tests/pmix_check" 2>&1) || fail "pmix_check across hosts: $out"
  expect_eq "ranks that saw every peer's PMIx value" "$(grep -c 'all peer values correct' <<<"$out")" 4
else
  note "PMIx across hosts not checked: $(no_pmix_reason); launch-no-pmix.sh checks the --mpi=none route across netns hosts"
fi
"$omni_cluster" --dir "$dir" status >"$work/status.out" || fail "status: $(cat "$work/status.out")"
grep -q "^hosts     netns: ctl $net.1" "$work/status.out" || fail "status does not show the hosts: $(cat "$work/status.out")"

# A crash: every daemon killed, the namespaces and bridge left behind. The next up cleans up
# and comes back.
# munged's pid file may name a process already gone; the crash is checked just below.
kill -KILL $(cat "$dir"/run/*.pid) 2>/dev/null || true
sleep 0.5
[ -n "$(leftovers "$base")" ] || fail "the crash left nothing to clean (the test cannot see what down removes)"
"$omni_cluster" --dir "$dir" up --hosts netns --nodes 4 --port-base "$base" --build-dir "$top_build" >"$work/up2.out" ||
  fail "up after a crash failed: $(cat "$work/up2.out")"
expect_eq "srun -N4 hostname after a crash and up" "$(srun -N4 hostname | sort | tr '\n' ' ')" "n1 n2 n3 n4 "

"$omni_cluster" --dir "$dir" down >/dev/null || fail "down failed"
expect_eq "what down left" "$(leftovers "$base")" ""
if [ $run_before = 0 ]; then [ ! -d /run/netns ] || fail "down left /run/netns, which up made"; fi
note "ok: 4 hosts n1..n4 at $net.11-14, controller ctl at $net.1; down left nothing"
