#!/bin/bash
# omni-ckpt command line: --help and exit codes, ls/show/verify (text and JSON), merge,
# reshard, gc, verify naming the tensor and file of a missing shard, and shards that
# h5repack rewrote.
set -u
: "${OMNI_CKPT:?run through make check}" "${MAKE_TEST_CKPT:?run through make check}"
PY=/usr/bin/python3
tmp=$(mktemp -d /tmp/omni-ckpt-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/cli_lib.sh"

# Usage and help.
expect 2 "$OMNI_CKPT"
expect 0 "$OMNI_CKPT" --help; grep_out "reshard CKPT --dp M -o OUT" out
expect 2 "$OMNI_CKPT" frobnicate; grep_out "unknown command 'frobnicate'" err
for c in ls show verify merge reshard gc; do
    expect 0 "$OMNI_CKPT" "$c" --help; grep_out "Usage: omni-ckpt $c" out
done
expect 2 "$OMNI_CKPT" ls
expect 2 "$OMNI_CKPT" ls --bogus "$tmp"
expect 2 "$OMNI_CKPT" reshard "$tmp/x" --dp 0 -o "$tmp/y"; grep_out "\-\-dp: '0' is out of range" err
expect 2 "$OMNI_CKPT" reshard "$tmp/x" --dp -3 -o "$tmp/y"
expect 2 "$OMNI_CKPT" gc "$tmp" ; grep_out "missing --keep K" err
expect 2 "$OMNI_CKPT" gc "$tmp" --keep 0
expect 1 "$OMNI_CKPT" ls "$tmp/nonexistent"; grep_out "nonexistent: not a directory" err

root=$tmp/root
"$MAKE_TEST_CKPT" "$root" 100 3 >/dev/null || fail "make_test_ckpt 100"
"$MAKE_TEST_CKPT" "$root" 200 3 --base "$root/step-0000000100" >/dev/null || fail "make_test_ckpt 200"
mkdir -p "$root/.step-0000000300.partial-0"

expect 0 "$OMNI_CKPT" ls "$root"; grep_out "INCOMPLETE" out; grep_out "step-0000000100 (" out
expect 0 "$OMNI_CKPT" ls --json "$root"
$PY - "$tmp/out" <<'PYEOF' || fail "ls --json content"
import json, sys
e = json.load(open(sys.argv[1]))
assert [x["step"] for x in e] == [100, 200, 300], e
assert [x["complete"] for x in e] == [True, True, False], e
assert all("path" in x for x in e)
assert e[1]["incremental"] and e[1]["bases"] == ["step-0000000100"], e[1]
assert e[1]["latest"] and not e[0]["latest"]
PYEOF

expect 0 "$OMNI_CKPT" show "$root/step-0000000200"; grep_out "model/frozen  fp32 \[64,256\]" out
grep_out "../step-0000000100/shard-00000.h5" out
expect 0 "$OMNI_CKPT" show --json "$root/step-0000000200"
$PY -c 'import json,sys; m=json.load(open(sys.argv[1])); assert m["step"]==200 and m["format_version"]==1 and len(m["tensors"])==4' "$tmp/out" || fail "show --json"

expect 0 "$OMNI_CKPT" verify "$root/step-0000000200"; grep_out "OK, 10 sources" out
expect 0 "$OMNI_CKPT" verify --json "$root/step-0000000200"
$PY -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["ok"] and r["sources_checked"]==10' "$tmp/out" || fail "verify --json"
expect 1 "$OMNI_CKPT" verify "$root/.step-0000000300.partial-0"; grep_out "no index.h5" err

expect 0 "$OMNI_CKPT" merge "$root/step-0000000200" -o "$tmp/merged"
expect 1 "$OMNI_CKPT" merge "$root/step-0000000200" -o "$tmp/merged"; grep_out "already exists" err
expect 0 "$OMNI_CKPT" verify "$tmp/merged"
expect 0 "$OMNI_CKPT" show --json "$tmp/merged"
grep -q '\.\./' "$tmp/out" && fail "merged checkpoint still references another directory"
expect 0 "$OMNI_CKPT" reshard "$root/step-0000000200" --dp 5 -o "$tmp/r5"
expect 0 "$OMNI_CKPT" verify "$tmp/r5"
expect 0 "$OMNI_CKPT" show --json "$tmp/r5"
$PY -c 'import json,sys; m=json.load(open(sys.argv[1])); assert m["writers"]==5' "$tmp/out" || fail "reshard writers"

# gc: the partial is young, so the default grace leaves it; --grace 0 removes it. step-100 is
# not kept but step-200 reads its frozen slices: those files stay.
expect 0 "$OMNI_CKPT" gc "$root" --keep 1; grep_out "skipped .step-0000000300.partial-0" out
grep_out "removed .*step-0000000100/index.h5" out
grep_out "kept files of step-0000000100 that newer checkpoints reference" out
expect 0 "$OMNI_CKPT" gc "$root" --keep 1 --grace 0 --dry-run
[ -d "$root/.step-0000000300.partial-0" ] || fail "dry run removed something"
expect 0 "$OMNI_CKPT" gc "$root" --keep 1 --grace 0 --json
$PY - "$tmp/out" <<'PYEOF' || fail "gc --json content"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["removed"] == [".step-0000000300.partial-0"], r
assert r["retained_for_references"] == ["step-0000000100"], r
PYEOF
expect 0 "$OMNI_CKPT" verify "$root/step-0000000200"

# A missing shard: verify exits 1 naming each failing tensor and the file.
rm "$root/step-0000000100/shard-00001.h5"
expect 1 "$OMNI_CKPT" verify "$root/step-0000000200"
grep_out "tensor model/frozen: .*step-0000000100/shard-00001.h5: source file is missing" err
expect 1 "$OMNI_CKPT" verify --json "$root/step-0000000200"
$PY -c 'import json,sys; r=json.load(open(sys.argv[1])); assert not r["ok"] and r["issues"][0]["tensor"]=="model/frozen"' "$tmp/out" || fail "verify --json failure"

# Ranks as separate processes writing concurrently, then one commit: the same checkpoint as
# one process playing every rank (same slices, same checksums).
par=$tmp/par
for r in 0 1 2 3; do "$MAKE_TEST_CKPT" "$par" 7 4 --attempt g2 --only-rank $r & done
wait
"$MAKE_TEST_CKPT" "$par" 7 4 --attempt g2 --commit-only >/dev/null || fail "commit of concurrently written shards"
"$MAKE_TEST_CKPT" "$tmp/seq" 7 4 >/dev/null || fail "sequential reference"
expect 0 "$OMNI_CKPT" verify "$par/step-0000000007"
"$OMNI_CKPT" show --json "$par/step-0000000007" >"$tmp/par.json"
"$OMNI_CKPT" show --json "$tmp/seq/step-0000000007" >"$tmp/seq.json"
$PY -c 'import json,sys; a,b=(json.load(open(f)) for f in sys.argv[1:]); assert a["tensors"]==b["tensors"] and a["rank_states"]==b["rank_states"]' \
    "$tmp/par.json" "$tmp/seq.json" || fail "concurrent ranks wrote a different checkpoint"

# Shards rewritten by h5repack (chunked and deflated, so read through HDF5 rather than with
# plain reads): verify and reshard still work, and the resharded tensors hold the original's
# values, as h5diff reads both through their index's virtual datasets.
rp=$tmp/repack
"$MAKE_TEST_CKPT" "$rp" 9 2 --rows 8192 >/dev/null || fail "make_test_ckpt for h5repack"
cp -a "$rp/step-0000000009" "$tmp/orig9"
for s in "$rp"/step-0000000009/shard-*.h5; do
    h5repack -f GZIP=1 "$s" "$s.z" && mv "$s.z" "$s" || fail "h5repack $s"
done
h5dump -p -H -d /t/model/frozen "$rp/step-0000000009/shard-00000.h5" | grep -q DEFLATE ||
    fail "h5repack left /t/model/frozen uncompressed"
expect 0 "$OMNI_CKPT" verify "$rp/step-0000000009"
expect 0 "$OMNI_CKPT" reshard "$rp/step-0000000009" --dp 3 -o "$tmp/rp3"
expect 0 "$OMNI_CKPT" verify "$tmp/rp3"
for t in model/embed model/layers.0/w model/frozen optim/step; do
    expect 0 h5diff "$tmp/orig9/index.h5" "$tmp/rp3/index.h5" "/tensors/$t" "/tensors/$t"
done

[ "$fails" -eq 0 ] && echo "cli: all checks passed"
exit $((fails > 0))
