#!/bin/bash
# omni-ckpt ls and gc while another process holds a checkpoint's index open for writing
# (h5py "r+": HDF5's file lock makes it unreadable to us), and merge/reshard refusing outputs
# that gc would later remove.
set -u
: "${OMNI_CKPT:?run through make check}" "${MAKE_TEST_CKPT:?run through make check}"
PY=/usr/bin/python3
tmp=$(mktemp -d /tmp/omni-ckpt-catalog.XXXXXX)
holder=
trap '[ -n "$holder" ] && kill "$holder" 2>/dev/null; rm -rf "$tmp"' EXIT
. "$(dirname "$0")/cli_lib.sh"

root=$tmp/root
for s in 1 2 3; do "$MAKE_TEST_CKPT" "$root" $s 2 >/dev/null || fail "make_test_ckpt $s"; done
s3=$root/step-0000000003

# Hold step 3's index open for writing until told to stop.
$PY - "$s3/index.h5" "$tmp/ready" "$tmp/stop" <<'PYEOF' &
import h5py, os, sys, time
f = h5py.File(sys.argv[1], "r+")
open(sys.argv[2], "w").close()
for _ in range(600):
    if os.path.exists(sys.argv[3]):
        break
    time.sleep(0.1)
PYEOF
holder=$!
for _ in $(seq 100); do [ -e "$tmp/ready" ] && break; sleep 0.1; done
[ -e "$tmp/ready" ] || fail "h5py did not open the index"

expect 0 "$OMNI_CKPT" ls "$root"
grep_out "step-0000000003 .* UNREADABLE\* .* unreadable: .*step-0000000003/index.h5" out
expect 0 "$OMNI_CKPT" ls --json "$root"
$PY - "$tmp/out" <<'PYEOF' || fail "ls --json of an unreadable checkpoint"
import json, sys
e = json.load(open(sys.argv[1]))
assert [x["complete"] for x in e] == [True, True, True], e
assert [x["unreadable"] for x in e] == [False, False, True], e
assert e[2]["problem"].startswith("unreadable: ") and e[2]["latest"], e[2]
PYEOF
before=$(cd "$root" && find . | sort)
expect 1 "$OMNI_CKPT" gc "$root" --keep 1 --grace 0
grep_out "omni-ckpt gc: step-0000000003: unreadable: .*step-0000000003/index.h5" err
grep_out "cannot tell which files an unreadable checkpoint references" err
[ "$(cd "$root" && find . | sort)" = "$before" ] || fail "gc removed something while an index was unreadable"
expect 1 "$OMNI_CKPT" gc "$root" --keep 1 --grace 0 --json
$PY -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["removed"]==[] and len(r["unreadable"])==1, r' \
    "$tmp/out" || fail "gc --json while an index was unreadable"

touch "$tmp/stop"; wait "$holder"; holder=
expect 0 "$OMNI_CKPT" gc "$root" --keep 1 --grace 0; grep_out "removed step-0000000001" out
[ -d "$s3" ] || fail "gc removed the newest checkpoint"
[ "$(readlink "$root/latest")" = step-0000000003 ] || fail "latest -> $(readlink "$root/latest")"

# Outputs gc would destroy: exit 1 naming the path and what is expected, nothing created.
expect 1 "$OMNI_CKPT" reshard "$s3" --dp 3 -o "$s3/sub"
grep_out "output $s3/sub lies inside the source checkpoint $s3" err
expect 1 "$OMNI_CKPT" merge "$s3" -o "$root/step-0000000030"
grep_out "is named for step 30, but $s3 holds step 3: expected step-0000000003" err
[ -e "$s3/sub" ] && fail "reshard created $s3/sub"
[ -e "$root/step-0000000030" ] && fail "merge created step-0000000030"
expect 0 "$OMNI_CKPT" ls "$root"
grep -q INCOMPLETE "$tmp/out" && fail "a refused rewrite left something behind: $(cat "$tmp/out")"

[ "$fails" -eq 0 ] && echo "catalog_cli: all checks passed"
exit $((fails > 0))
