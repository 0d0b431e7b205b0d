#!/usr/bin/env bash
# Every script answers --help with its usage (exit 0), and a bad invocation with its usage on
# stderr and exit 2, before it changes anything.
. "$(dirname "$0")/lib.sh"
scripts=(omni-cluster install-deps build demo test fresh-root check-deps)
for s in "${scripts[@]}"; do
  path=$top_src/scripts/$s
  [ -x "$path" ] || fail "$path is missing or not executable"
  out=$("$path" --help) || fail "$s --help exited $?"
  grep -q '^Usage: ' <<<"$out" || fail "$s --help prints no 'Usage:' line"
done

# check_bad SCRIPT ARGS...: exit 2 and a usage text on stderr
check_bad() {
  local s=$1; shift
  local rc=0
  "$top_src/scripts/$s" "$@" >"$work/out" 2>"$work/err" </dev/null || rc=$?
  expect_eq "exit status of '$s $*'" "$rc" 2
  grep -q '^Usage: ' "$work/err" || fail "'$s $*' printed no usage on stderr: $(head -3 "$work/err")"
  [ ! -s "$work/out" ] || fail "'$s $*' printed on stdout: $(head -3 "$work/out")"
}
for s in "${scripts[@]}"; do
  check_bad "$s" --no-such-flag
  check_bad "$s" --nodes 0
  check_bad "$s" --nodes abc
done
# omni-cluster's own values
check_bad omni-cluster up --nodes 0
check_bad omni-cluster up --nodes abc
check_bad omni-cluster up --nodes 65
check_bad omni-cluster up --nodes -1
check_bad omni-cluster up --nodes 2x
check_bad omni-cluster up --gpus-per-node 17
check_bad omni-cluster up --select linear
check_bad omni-cluster up --port-base 80
check_bad omni-cluster up --nodes
check_bad omni-cluster
check_bad omni-cluster up down
check_bad omni-cluster status --nodes 2
check_bad omni-cluster up --purge
check_bad omni-cluster --dir '/tmp/a b' status
check_bad omni-cluster up --conf-extra /nonexistent/slurm.conf
# kill and start name one daemon; --signal belongs to kill
check_bad omni-cluster kill
check_bad omni-cluster kill slurmd-n0
check_bad omni-cluster kill slurmctld slurmd-n1
check_bad omni-cluster kill slurmctld --signal BOGUS
check_bad omni-cluster start slurmctld --signal TERM
check_bad omni-cluster status slurmctld
check_bad demo --nodes 65
check_bad demo --nodes 3
check_bad demo --out ''
check_bad demo --gpus-per-node x
note "ok: --help and bad invocations of ${scripts[*]}"
