#!/usr/bin/env bash
# select/omni places units inside domains (select_omni(8)): the same jobs on two clusters of
# 2 nodes x 4 fake GPUs, one under select/cons_tres, one under select/omni with a site
# topology file that gives the nodes different PCIe layouts:
#   n1: switches {0,1} {2,3}        n2: switches {0,2} {1,3}
# A 1-GPU job holds GPU 0 of each node. Then
#   X  -N2 --gres=gpu:2, 2 units x 2 ranks @pcie: cons_tres gives each node GPUs 1-2, across
#      switches on both; select/omni gives n1 {2,3} and n2 {1,3}, whole switches;
#   (a 2-GPU job then holds GPUs 0-1 of n2 instead: n2's free GPUs 2,3 straddle its
#   switches; one job, because a node has only 2 CPUs here)
#   W  the same 2:2 job: runs across switches under cons_tres, waits under select/omni;
#   E  -N1-2 --gres=gpu:2, elastic 1:4 units of 2 @pcie: cons_tres gives it both nodes;
#      select/omni starts it with the one unit that fits, on n1 {2,3}.
# Under select/omni also: without the file, with a file that is not valid, and with a file
# that counts n2's GPUs wrong, slurmctld says so in its log and places X as cons_tres does.
. "$(dirname "$0")/lib.sh"
need_root
need_plugin select "this test checks its placement"
# At exit, whichever cluster is still up goes down; '|| true': the other one is down already
# (run stops each cluster itself and fails the test when that fails).
trap 'for k in cons_tres omni; do "$omni_cluster" --dir "$work/$k" down >/dev/null 2>&1 || true; done; cleanup_work' EXIT

unit=(--omni-unit=2@pcie)

# site_file OUT [N2_GPUS]: the site topology file of the two nodes (n2 with N2_GPUS GPUs:
# a stale file when that is not 4).
site_file() {
  /usr/bin/python3 - "$1" "${2:-4}" <<'EOS'
import json, sys
def node(name, gpus, pcie):
    every = list(range(gpus))
    return {"hostname": name, "cpu_count": 2, "core_count": 2, "core_cpus": ["0", "1"],
            "gpus": [{"index": g, "bdf": "0000:%02x:00.0" % (0x10 + g), "model": "H100", "type": "h100",
                      "numa": 0, "cpus": "0-1", "cores": "0-1", "nics": [], "nvmes": []} for g in every],
            "nics": [], "domains": {"pcie": pcie, "nvlink": pcie, "numa": [every], "node": [every]}}
n2 = int(sys.argv[2])
site = {"format": "omni-topology", "version": 1,
        "nodes": [node("n1", 4, [[0, 1], [2, 3]]),
                  node("n2", n2, [[0, 2], [1, 3]] if n2 == 4 else [[g] for g in range(n2)])]}
json.dump(site, open(sys.argv[1], "w"), indent=1)
EOS
  "$top_build/hal/omni-hal" validate "$1" >/dev/null || fail "the test's site file $1 is not valid"
}

# gpus ID: where job ID runs, "NODE:IDX ..." (its GPU indexes on each node, as Slurm has them;
# Slurm writes nodes with the same indexes as one host list).
gpus() {
  local nodes idx n out=
  while read -r nodes idx; do
    for n in $(scontrol show hostnames "$nodes"); do out+="$n:$idx "; done
  done < <(scontrol show job -d "$1" | sed -n 's/^ *Nodes=\([^ ]*\) .*GRES=[^ ]*(IDX:\([^)]*\)).*/\1 \2/p')
  echo "${out% }"
}

# reconfigure WITH-FILE LOG-PATTERN: put the site file in place (or remove it), make slurmctld
# reread its configuration, and wait for the line it logs about the file.
reconfigure() {
  local i
  if [ -n "$1" ]; then cp "$1" "$etc/omni-topology.json"; else rm -f "$etc/omni-topology.json"; fi
  : >"$work/mark"
  local before
  before=$(wc -l <"$ctld_log")
  scontrol reconfigure || fail "scontrol reconfigure failed"
  for i in $(seq 1 20); do
    tail -n +"$((before + 1))" "$ctld_log" | grep -q -- "$2" && return 0
    sleep 0.5
  done
  fail "slurmctld did not log '$2' after reconfigure: $(tail -n +"$((before + 1))" "$ctld_log" | grep select/omni)"
}

# run KIND: the jobs above on a fresh cluster of that select plugin, one line per result.
run() {
  select=$1
  local dir=$work/$1
  "$omni_cluster" --dir "$dir" up --nodes 2 --gpus-per-node 4 --select "$select" --build-dir "$top_build" \
    >"$work/up-$select.out" 2>&1 || { cat "$work/up-$select.out" >&2; fail "the $select cluster did not start"; }
  eval "$("$omni_cluster" --dir "$dir" env)"
  etc=$dir/etc ctld_log=$dir/log/slurmctld.log
  run_job b1 -w n1 --gres=gpu:1
  run_job b2 -w n2 --gres=gpu:1
  expect_eq "the 1-GPU jobs on the $select cluster" "$(gpus "$b1") $(gpus "$b2")" "n1:0 n2:0"
  if [ "$select" = omni ]; then
    grep -q "select/omni: no $etc/omni-topology.json: units are placed as select/cons_tres" "$ctld_log" ||
      fail "slurmctld did not log the missing site file: $(grep select/omni "$ctld_log")"
    run_job x -N2 --gres=gpu:2 --omni-elastic=2:2 "${unit[@]}"
    echo "X without file: $(gpus "$x")"
    scancel "$x"
    echo '{"format": "omni-topology", "version": 1, "nodes": [' >"$work/bad.json"
    reconfigure "$work/bad.json" "select/omni: $etc/omni-topology.json.*units are placed as select/cons_tres"
    run_job x -N2 --gres=gpu:2 --omni-elastic=2:2 "${unit[@]}"
    echo "X with a bad file: $(gpus "$x")"
    scancel "$x"
    site_file "$work/stale.json" 2
    reconfigure "$work/stale.json" "select/omni: node n2: 4 GPU(s) in Slurm, 2 in $etc/omni-topology.json"
    run_job x -N2 --gres=gpu:2 --omni-elastic=2:2 "${unit[@]}"
    echo "X with a stale file: $(gpus "$x")"
    scancel "$x"
    site_file "$work/site.json"
    reconfigure "$work/site.json" "select/omni: domain layouts of 2 node(s) from $etc/omni-topology.json"
  fi
  # A step of X on both nodes: the GPUs slurmd gives its tasks are those Slurm recorded.
  wrap="srun -N2 --ntasks-per-node=1 --gres=gpu:2 sh -c 'echo \$SLURMD_NODENAME:\$SLURM_STEP_GPUS' | sort >$work/x-step-$select.out; sleep 300" \
    run_job x -N2 --gres=gpu:2 --omni-elastic=2:2 "${unit[@]}"
  echo "X: $(gpus "$x")"
  for i in $(seq 1 20); do [ -s "$work/x-step-$select.out" ] && break; sleep 0.5; done
  echo "X's step: $(tr '\n' ' ' <"$work/x-step-$select.out" 2>/dev/null)"
  scancel "$x"
  scancel "$b2"
  run_job b2 -w n2 --gres=gpu:2
  expect_eq "the 2-GPU job on n2 ($select)" "$(gpus "$b2")" "n2:0-1"
  local w i
  w=$(sbatch --parsable -t 5 -o /dev/null -N2 --gres=gpu:2 --omni-elastic=2:2 "${unit[@]}" --wrap 'sleep 300')
  sleep 6  # two scheduling passes
  echo "W: $(squeue -h -j "$w" -o '%T %r') $(gpus "$w")"
  scancel "$w"
  run_job e -N1-2 --gres=gpu:2 --omni-elastic=1:4 "${unit[@]}"
  echo "E: $(gpus "$e")"
  if [ "$select" = omni ]; then
    grep -i "select/omni.*error\|error.*select/omni" "$ctld_log" | grep -v "omni-topology.json" &&
      fail "slurmctld logged select/omni errors besides the bad file's (above)"
  fi
  scancel -u root 2>/dev/null || true  # '|| true': the jobs may have ended already
  "$omni_cluster" --dir "$dir" down >/dev/null 2>&1 || fail "the $select cluster did not stop"
}

run cons_tres >"$work/cons_tres.txt"
run omni >"$work/omni.txt"
echo "--- cons_tres"
cat "$work/cons_tres.txt"
echo "--- omni"
cat "$work/omni.txt"
line() { sed -n "s/^$2: //p" "$work/$1.txt"; }
# cons_tres: lowest free GPUs, across the switches of both layouts.
expect_eq "X under cons_tres" "$(line cons_tres X)" "n1:1-2 n2:1-2"
expect_eq "W under cons_tres" "$(line cons_tres W)" "RUNNING None n1:1-2 n2:2-3"
expect_eq "E under cons_tres" "$(line cons_tres E)" "n1:1-2 n2:2-3"
# select/omni: whole switches, or not now.
expect_eq "X under select/omni" "$(line omni X)" "n1:2-3 n2:1,3"
expect_eq "W under select/omni" "$(line omni W)" "PENDING Resources "
expect_eq "E under select/omni" "$(line omni E)" "n1:2-3"
expect_eq "the GPUs of X's step under select/omni" "$(line omni "X's step")" "n1:2,3 n2:1,3 "
expect_eq "the GPUs of X's step under cons_tres" "$(line cons_tres "X's step")" "n1:1,2 n2:1,2 "
# Missing, bad or stale data: placed as cons_tres places it.
for why in "without file" "with a bad file" "with a stale file"; do
  expect_eq "X under select/omni $why" "$(line omni "X $why")" "$(line cons_tres X)"
done
note "ok: units inside whole switches under select/omni, across them under cons_tres; fall-backs logged"
