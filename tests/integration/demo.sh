#!/usr/bin/env bash
# scripts/demo, the README's main command, end to end: it must exit 0, say that the story
# held (every step of the elastic run bitwise the static run's, through a scontrol shrink and
# an omni-ctl grow), write a PNG, and leave nothing running. It brings up a cluster of its own.
# Its default trainer is the PyTorch example in exact mode (--trainer cpp, the C++ trainer,
# tells the same story; train-elastic.sh and ctl-grow.sh cover that trainer's resizes).
. "$(dirname "$0")/lib.sh"
need_root
[ "$(cd "$top_build" && pwd)" = "$(cd "$top_src" && pwd)/build" ] ||
  skip "scripts/demo builds in $top_src/build; this test's build is $top_build"
out=$work/out
rc=0
timeout 600 "$top_src/scripts/demo" --skip-deps --out "$out" --dir "$work/cluster" >"$work/demo.log" 2>&1 || rc=$?
grep -E '^== |^demo:|event:' "$work/demo.log" || true  # for the log only; checked below
[ $rc = 0 ] || { tail -n 40 "$work/demo.log" >&2; fail "scripts/demo exited $rc"; }
grep -Eq '^demo: held: 120 of 120 steps bitwise equal \(loss, LR, samples\), worlds 8 -> 4 -> 8 ' "$work/demo.log" ||
  fail "the demo's verdict: $(grep '^demo:' "$work/demo.log")"
expect_eq "loss.png's signature" "$(head -c 8 "$out/loss.png" | od -An -tx1 | tr -d ' \n')" 89504e470d0a1a0a
expect_eq "steps in the elastic metrics" "$(wc -l <"$out/elastic.jsonl")" 120
grep -q '^   each rank runs train_torch.py (PyTorch' "$work/demo.log" || fail "the demo did not run the PyTorch trainer"
# train_torch.py's metrics carry step_samples as [count, sum, sum of squares] over all ranks.
expect_eq "samples of step 120" "$(tail -n1 "$out/elastic.jsonl" | sed 's/.*"step_samples": \[\([0-9]*\),.*/\1/')" 32
# Torn down: no daemon of its cluster is left.
pgrep -f "$work/cluster" >/dev/null && fail "daemons of the demo's cluster are still running: $(pgrep -af "$work/cluster")"
note "ok: scripts/demo told the story and held"
