#!/usr/bin/env bash
# A plugstack.conf line with an unknown key: slurmd refuses to start, and its log names the
# key. Starts its own one-node cluster (the point is a daemon that will not start).
. "$(dirname "$0")/lib.sh"
need_root
[ -f "$top_build/spank/.libs/spank_omni.so" ] || fail "spank_omni.so is not built"
dir=$work/cluster
trap '"$omni_cluster" --dir "$dir" down >/dev/null 2>&1 || true; cleanup_work' EXIT
rc=0
"$omni_cluster" --dir "$dir" up --nodes 1 --build-dir "$top_build" --timeout 20 \
  --spank-args "max_units=8 bnid=no" >"$work/up.out" 2>&1 || rc=$?
expect_eq "exit of up with an unknown plugstack key" "$rc" 1
grep -qF "error: omni: plugstack.conf: unknown key 'bnid' in 'bnid=no'" "$dir/log/slurmd-n1.log" ||
  fail "slurmd's log does not name the key: $(tail -5 "$dir/log/slurmd-n1.log")"
grep -q "slurmd initialization failed" "$dir/log/slurmd-n1.log" || fail "slurmd did not refuse to start"
# omni-cluster showed the reason from the log.
grep -qF "unknown key 'bnid'" "$work/up.out" || fail "omni-cluster up did not show slurmd's log"
note "ok: slurmd refused to start, naming the key"
