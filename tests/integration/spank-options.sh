#!/usr/bin/env bash
# The SPANK plugin's --omni-* options, on a real cluster: listed in --help, bad values rejected
# at submit with a message naming the option (and nothing queued), good values in the job's
# environment and in every step, a bad plugstack.conf key refused with the key named.
. "$(dirname "$0")/lib.sh"
cluster_acquire 2 0
grep -q '^required .*spank_omni.so' "$CLUSTER_DIR/etc/plugstack.conf" ||
  fail "the cluster does not load spank_omni.so ($(cat "$CLUSTER_DIR/etc/plugstack.conf"))"
cd "$work"

options=(omni-elastic=MIN:MAX 'omni-unit=N[@DOMAIN]' omni-mp=M omni-global-batch=B
         omni-micro-batch=b omni-sm-slice=PCT 'omni-ckpt=DIR[:EVERY]' 'omni-policy=auto[,KEY=S...]|none')
for cmd in sbatch salloc srun; do
  help=$($cmd --help)
  for o in "${options[@]}"; do
    grep -qF -- "--$o" <<<"$help" || fail "$cmd --help does not list --$o"
  done
done

# option(s) | what the error must say
bad=(
  "--omni-elastic=|--omni-elastic=: expected MIN:MAX"
  "--omni-elastic=-1:4|MIN: '-1' is not a number"
  "--omni-elastic=0:4|MIN: '0' is out of range; expected an integer in 1..1024"
  "--omni-elastic=18446744073709551616:4|MIN: '18446744073709551616' is too large"
  "--omni-elastic=8:2|MIN is greater than MAX"
  "--omni-elastic=1:2000|MAX: '2000' is out of range; expected an integer in 1..1024"
  "--omni-elastic=4|--omni-elastic=4: expected MIN:MAX"
  "--omni-elastic=1:4x|MAX: '4x' is not a number"
  "--omni-elastic=1:2:3|expected MIN:MAX"
  "--omni-unit=0|--omni-unit=0: N: '0' is out of range"
  "--omni-unit=-4|N: '-4' is not a number"
  "--omni-unit=4@rack|DOMAIN: 'rack': expected one of pcie|nvlink|numa|node|any"
  "--omni-unit=4@|DOMAIN: '': expected one of"
  "--omni-unit=5000|N: '5000' is out of range; expected an integer in 1..4096"
  "--omni-mp=0|--omni-mp=0: '0' is out of range"
  "--omni-unit=4 --omni-mp=3|--omni-mp=3: must divide the unit size 4"
  "--omni-global-batch=0|--omni-global-batch=0: '0' is out of range"
  "--omni-global-batch=12x|'12x' is not a number"
  "--omni-global-batch=99999999999999999999|is too large"
  "--omni-micro-batch=4|--omni-micro-batch=4: needs --omni-global-batch=B"
  "--omni-global-batch=10 --omni-micro-batch=4|--omni-global-batch=10: not divisible by --omni-micro-batch=4"
  "--omni-elastic=1:4 --omni-global-batch=30|it is not for u = 4 (d=4, b*d=4); nearest global batch sizes that work for the whole range: 24, 36"
  "--omni-elastic=1:100 --omni-global-batch=1024|no global batch size up to 2^40 works for every unit count in 1..100"
  "--omni-sm-slice=0|--omni-sm-slice=0: '0' is out of range; expected an integer in 1..100"
  "--omni-sm-slice=101|'101' is out of range; expected an integer in 1..100"
  "--omni-sm-slice=50|SM slices are not allowed on this cluster"
  "--omni-ckpt=ckpt|--omni-ckpt=ckpt: DIR must be an absolute path"
  "--omni-ckpt=/ckpt:0|EVERY: '0' is out of range"
  "--omni-ckpt=/ckpt:|EVERY: empty value"
  "--omni-elastic= 1:4|MIN: ' 1' is not a number"
  "--omni-policy=auto|--omni-policy=auto: needs --omni-elastic=MIN:MAX"
  "--omni-elastic=1:4 --omni-policy=always|'always': expected auto or none"
  "--omni-elastic=1:4 --omni-policy=auto,interval=0|interval: '0' is out of range; expected an integer in 1..3600"
  "--omni-elastic=1:4 --omni-policy=auto,cooldown=9|unknown key 'cooldown' in 'cooldown=9'"
  "--omni-elastic=1:4 --omni-policy=none,interval=5|'none' takes no settings"
)
[ ${#bad[@]} -ge 25 ] || fail "the table needs at least 25 bad inputs"
i=0
for row in "${bad[@]}"; do
  i=$((i + 1))
  args=${row%%|*} want=${row#*|}
  name=omni-bad-$$-$i
  rc=0
  # shellcheck disable=SC2086 # the options are split on purpose
  IFS=' ' read -r -a argv <<<"$args"
  [ "$args" = "--omni-elastic= 1:4" ] && argv=("--omni-elastic= 1:4")
  sbatch --job-name="$name" "${argv[@]}" --wrap true >"$work/out" 2>"$work/err" || rc=$?
  [ $rc != 0 ] || fail "sbatch $args was accepted: $(cat "$work/out")"
  grep -qF -- "omni: " "$work/err" || fail "sbatch $args: no 'omni:' message: $(cat "$work/err")"
  grep -qF -- "$want" "$work/err" || fail "sbatch $args: message lacks '$want': $(cat "$work/err")"
  [ -z "$(squeue -h -t all -n "$name")" ] || fail "sbatch $args queued a job"
done
note "$i bad inputs rejected at submit, nothing queued"

# srun and salloc reject at submit too.
for cmd in "srun -N1" "salloc -N1"; do
  rc=0; $cmd --omni-elastic=0:4 true >/dev/null 2>"$work/err" || rc=$?
  [ $rc != 0 ] && grep -qF "MIN: '0' is out of range" "$work/err" ||
    fail "$cmd --omni-elastic=0:4: rc=$rc, $(cat "$work/err")"
done

# Good values: in the batch script's environment and in every step, also with --export=NONE
# (then only the plugin can have put them there).
mkdir -p "$work/ckpt"
good=(--omni-elastic=1:4 --omni-unit=2@pcie --omni-global-batch=48 --omni-micro-batch=2
      --omni-ckpt="$work/ckpt:5" --omni-policy=auto,shrink_after=7,interval=3)
want="OMNI_CKPT_DIR=$work/ckpt OMNI_CKPT_EVERY=5 OMNI_ELASTIC_MAX=4 OMNI_ELASTIC_MIN=1 OMNI_GLOBAL_BATCH=48 OMNI_MICRO_BATCH=2 OMNI_MP=1 OMNI_POLICY=auto,grow_cooldown=180,shrink_cooldown=600,grow_after=60,shrink_after=7,interval=3 OMNI_UNIT_DOMAIN=pcie OMNI_UNIT_SIZE=2 "
cat >job.sh <<'EOS'
#!/bin/bash
export PATH=@PATH@   # --export=NONE leaves the script without a PATH: the submitter's
echo "batch $(env | grep -E "^OMNI_(ELASTIC|UNIT|MP|GLOBAL|MICRO|SM|CKPT|POLICY)" | sort | tr '\n' ' ')"
srun -N2 -n2 /bin/bash -c 'PATH=/usr/bin:/bin; echo "step $(env | grep -E "^OMNI_(ELASTIC|UNIT|MP|GLOBAL|MICRO|SM|CKPT|POLICY)" | sort | tr "\n" " ")"'
EOS
# Where the submitter finds srun: /usr/bin for Debian's Slurm, /usr/local/bin for one built
# from source. ('|' cannot be in a PATH entry that matters here.)
sed -i "s|@PATH@|$PATH|" job.sh
for export in ALL NONE; do
  out=$(sbatch --parsable --wait -N2 --export=$export "${good[@]}" -o "$work/good-$export.out" job.sh) ||
    fail "sbatch with good options (--export=$export) failed: $(cat "$work/good-$export.out")"
  expect_eq "OMNI_* in the batch script (--export=$export)" "$(grep '^batch' "$work/good-$export.out")" "batch $want"
  expect_eq "OMNI_* in both tasks of the step (--export=$export)" \
    "$(grep -c "^step $want\$" "$work/good-$export.out")" 2
  jobid=${out%%;*}
done

# The spank job environment reaches slurmctld and slurmd: their prologs see it as SPANK_OMNI_*
# (recorded by the prolog that tests/integration/test-cluster installs).
spank_want=$(echo "$want" | tr ' ' '\n' | grep . | sed 's/^/SPANK_/' | tr '\n' ' ')
for where in slurmctld n1 n2; do
  rec=$CLUSTER_DIR/prolog-env/$jobid.$where
  [ -f "$rec" ] || fail "no prolog record $rec (start the cluster with tests/integration/test-cluster)"
  expect_eq "spank job environment seen by the $where prolog" \
    "$(grep -E '^SPANK_OMNI_(ELASTIC|UNIT|MP|GLOBAL|MICRO|SM|CKPT|POLICY)' "$rec" | sort | tr '\n' ' ')" "$spank_want"
done

# The checkpoint directory is checked as the job's user in every task.
rc=0; srun -N1 --omni-ckpt=/nonexistent/omni-ckpt true 2>"$work/err" || rc=$?
[ $rc != 0 ] && grep -qF -- "--omni-ckpt=/nonexistent/omni-ckpt: No such file or directory" "$work/err" ||
  fail "a missing checkpoint directory was not refused: rc=$rc $(cat "$work/err")"

# A plugstack.conf with an unknown key: the plugin refuses to load and names the key.
sed "s|^PlugStackConfig=.*|PlugStackConfig=$work/bad-plugstack.conf|" "$SLURM_CONF" >"$work/slurm.conf"
echo "required $(awk '/^required/ {print $2}' "$CLUSTER_DIR/etc/plugstack.conf") max_units=8 bnid=no" >"$work/bad-plugstack.conf"
rc=0; SLURM_CONF=$work/slurm.conf sbatch --wrap true >/dev/null 2>"$work/err" || rc=$?
[ $rc != 0 ] || fail "sbatch ran with an unknown plugstack key"
grep -qF "omni: plugstack.conf: unknown key 'bnid' in 'bnid=no'" "$work/err" ||
  fail "the unknown key is not named: $(cat "$work/err")"

# The site's say on policies (sbatch reads plugstack.conf itself): policy=deny refuses
# --omni-policy=auto and lets none through; the default floors refuse short cooldowns and
# intervals, naming the key.
plug=$(awk '/^required/ {print $2}' "$CLUSTER_DIR/etc/plugstack.conf")
site_policy() {  # site_policy 'PLUGSTACK ARGS' SBATCH-OPTIONS...: sbatch's exit and stderr
  echo "required $plug $1" >"$work/bad-plugstack.conf"
  shift
  rc=0; SLURM_CONF=$work/slurm.conf sbatch --parsable -N1 --hold "$@" --wrap true >"$work/out" 2>"$work/err" || rc=$?
}
site_policy "policy=deny" --omni-elastic=1:2 --omni-policy=auto
[ $rc != 0 ] && grep -qF "elastic policies are not allowed on this cluster (plugstack.conf policy=deny)" "$work/err" ||
  fail "policy=deny let --omni-policy=auto through: rc=$rc $(cat "$work/err")"
site_policy "policy=deny" --omni-elastic=1:2 --omni-policy=none
[ $rc = 0 ] || fail "policy=deny refused --omni-policy=none: $(cat "$work/err")"
scancel "$(cut -d';' -f1 "$work/out")"
site_policy "" --omni-elastic=1:2 --omni-policy=auto,grow_cooldown=10
[ $rc != 0 ] && grep -qF "grow_cooldown=10 is below this cluster's minimum 60 s (plugstack.conf policy_min_cooldown)" "$work/err" ||
  fail "the default cooldown floor let grow_cooldown=10 through: rc=$rc $(cat "$work/err")"
site_policy "policy_min_interval=30" --omni-elastic=1:2 --omni-policy=auto,interval=10
[ $rc != 0 ] && grep -qF "interval=10 is below this cluster's minimum 30 s (plugstack.conf policy_min_interval)" "$work/err" ||
  fail "policy_min_interval=30 let interval=10 through: rc=$rc $(cat "$work/err")"
echo "required $(awk '/^required/ {print $2}' "$CLUSTER_DIR/etc/plugstack.conf") max_units=8" >"$work/bad-plugstack.conf"
rc=0; SLURM_CONF=$work/slurm.conf sbatch --omni-elastic=1:9 --wrap true >/dev/null 2>"$work/err" || rc=$?
[ $rc != 0 ] && grep -qF "MAX: '9' is out of range; expected an integer in 1..8" "$work/err" ||
  fail "max_units=8 from plugstack.conf not applied: rc=$rc $(cat "$work/err")"
note "ok"
