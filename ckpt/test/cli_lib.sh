# Shared by the omni-ckpt command-line tests (sourced after they set $tmp): failures are
# counted in $fails; expect runs a command with its output in $tmp/out and $tmp/err and
# checks its exit status; grep_out looks for a string in one of those files.
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
# expect RC CMD...
expect() {
    local want=$1; shift
    "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    [ "$rc" -eq "$want" ] || fail "'$*' exited $rc, expected $want; stderr: $(head -c 400 "$tmp/err")"
}
# grep_out STRING out|err
grep_out() { grep -q -- "$1" "$tmp/$2" || fail "'$1' not in $2: $(head -c 400 "$tmp/$2")"; }
