#!/usr/bin/env bash
# A plugin built against another Slurm release is refused with a message naming the file and
# its release, and no Slurm program crashes (#47). The plugins are this build's own, copied
# with plugin_version set to another release (set-plugin-version.py: 22.05.8 under 24.11,
# 24.11.5 under 22.05). plugin_version is what Slurm reads first and refuses on, so the
# copy meets the same check as a plugin built against that release; 22.05-built plugins
# copied into a 24.11 root give the same log lines (checked by hand, #47). One cluster a
# plugin, the others this build's own:
#  - job_submit/omni (where built): slurmctld logs "Incompatible Slurm plugin .../job_submit_omni.so
#    version (R)" and stops with "fatal: failed to initialize job_submit plugin";
#  - select/omni (where built), SelectType=select/omni: the same line for select_omni.so,
#    then "fatal: Can't find plugin for select/omni";
#  - the SPANK plugin (required in plugstack.conf): slurmd logs the same line and "slurmd
#    initialization failed"; sbatch and srun exit non-zero with "Incompatible Slurm plugin"
#    and "Failed to load plugin" on their stderr.
# Each daemon ends by its own message (the last line of its log), not by a signal.
# How it fails: when Slurm loads the foreign copy (its version check gone, or the copy left at
# this release: set OTHER_RELEASE to the running one), the cluster comes up and the test says
# so; when a daemon dies by a signal, its log ends elsewhere.
. "$(dirname "$0")/lib.sh"
need_root
submit_so=$top_build/job_submit/.libs/job_submit_omni.so
spank_so=$top_build/spank/.libs/spank_omni.so
select_so=$top_build/select_plugin/.libs/select_omni.so
need_built "$spank_so"
trap 'for c in "$work"/c-*; do [ -d "$c" ] && "$omni_cluster" --dir "$c" down >/dev/null 2>&1 || true; done; cleanup_work' EXIT

running=$(slurmctld -V | awk '{print $NF}')
case "$running" in
  22.05.*) other=24.11.5 ;;
  *) other=22.05.8 ;;
esac
other=${OTHER_RELEASE:-$other}
note "Slurm $running; the copies say $other"

# foreign NAME SUBDIR FILE: a build-dir-like tree holding only FILE, at release $other.
foreign() {
  mkdir -p "$work/f-$1/$2/.libs"
  cp "$3" "$work/f-$1/$2/.libs/"
  /usr/bin/python3 "$top_src/tests/integration/set-plugin-version.py" "$work/f-$1/$2/.libs/$(basename "$3")" "$other" >/dev/null ||
    fail "cannot set plugin_version of a copy of $3"
}

# up NAME ARGS...: a one-node cluster of the foreign tree NAME that must not come up.
up() {
  local name=$1; shift
  if "$omni_cluster" --dir "$work/c-$name" up --nodes 1 --no-accounting --timeout 20 \
       --build-dir "$work/f-$name" "$@" >"$work/up-$name.out" 2>&1; then
    fail "$name: the cluster came up with a plugin of Slurm $other in Slurm $running"
  fi
}

# refused LOG FILE LAST: LOG names FILE as of release $other, and ends with LAST.
refused() {
  local log=$1 file=$2 last=$3
  [ -f "$log" ] || fail "no $log ($(tail -n 5 "$work"/up-*.out))"
  grep -q "Incompatible Slurm plugin .*/$file version ($other)" "$log" ||
    fail "$log does not name $file of Slurm $other: $(grep -i "$file\|fatal" "$log" | tail -n 5)"
  tail -n 1 "$log" | grep -q -- "$last" ||
    fail "$log ends with '$(tail -n 1 "$log")', expected '$last' (did it die by a signal?)"
  note "ok: $(basename "$log"): $(tail -n 1 "$log" | sed 's/^\[[^]]*\] //')"
}

# Where job_submit/omni (and select/omni) are not built (Debian unstable's 26.05.5: no source
# tree of that release), their cases are left out and the SPANK plugin's still runs.
if [ -f "$submit_so" ]; then
  foreign submit job_submit "$submit_so"
  up submit
  refused "$work/c-submit/log/slurmctld.log" job_submit_omni.so "fatal: failed to initialize job_submit plugin"
  # '|| true': slurmctld refused to start here (the point of the test), so down may find it
  # gone; the EXIT trap downs every c-* again.
  "$omni_cluster" --dir "$work/c-submit" down >/dev/null 2>&1 || true
else
  note "job_submit/omni is not built here (configure: $(sed -n 's|^  job_submit/omni built *||p' "$top_build/config.log" 2>/dev/null | tail -n 1)): its case is left out"
fi

if [ -f "$select_so" ]; then
  foreign select select_plugin "$select_so"
  up select --select omni
  refused "$work/c-select/log/slurmctld.log" select_omni.so "fatal: Can't find plugin for select/omni"
  "$omni_cluster" --dir "$work/c-select" down >/dev/null 2>&1 || true
else
  note "select/omni is not built here: its case is left out"
fi

foreign spank spank "$spank_so"
up spank --no-job-submit
refused "$work/c-spank/log/slurmd-n1.log" spank_omni.so "slurmd initialization failed"
for cmd in "sbatch --wrap true" "srun -N1 true"; do
  rc=0
  SLURM_CONF=$work/c-spank/etc/slurm.conf timeout 30 $cmd >"$work/cmd.out" 2>&1 || rc=$?
  [ $rc != 0 ] || fail "'$cmd' ran with a SPANK plugin of Slurm $other"
  [ $rc -lt 124 ] || fail "'$cmd' exited $rc (timed out or died by a signal): $(cat "$work/cmd.out")"
  grep -q "Incompatible Slurm plugin .*/spank_omni.so version ($other)" "$work/cmd.out" &&
    grep -q "Failed to load plugin" "$work/cmd.out" ||
    fail "'$cmd' did not say why: $(cat "$work/cmd.out")"
  note "ok: '${cmd%% *}' exited $rc: $(grep -m1 Incompatible "$work/cmd.out")"
done
note "ok: plugins of Slurm $other refused by Slurm $running, each with its file and release named"
