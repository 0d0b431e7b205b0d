#!/usr/bin/env bash
# omni-train-demo standalone: a run resumed from a checkpoint is bitwise the same as one that
# never stopped; SIGTERM checkpoints and exits 143; bad options exit 2 naming the option.
set -euo pipefail
demo=${OMNI_TRAIN_DEMO:?set by make check}
omni_ckpt=${OMNI_CKPT:?set by make check}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }

"$demo" --steps 100 --global-batch 64 --micro-batch 8 --lr 0.05 --ckpt A --ckpt-every 25 --metrics a.jsonl
"$demo" --steps 100 --global-batch 64 --micro-batch 8 --lr 0.05 --ckpt B --ckpt-every 25 --metrics b.jsonl
[ "$(wc -l <a.jsonl)" = 100 ] || fail "expected 100 metrics lines, got $(wc -l <a.jsonl)"
cmp -s a.jsonl b.jsonl || fail "two identical runs differ"
# Lose the last two checkpoints, as a crash after step 50 would, and resume.
rm -rf B/step-0000000075 B/step-0000000100
"$demo" --steps 100 --global-batch 64 --micro-batch 8 --lr 0.05 --ckpt B --ckpt-every 25 --metrics b.jsonl 2>resume.err
grep -q "resumed at step 50" resume.err || fail "did not resume at step 50: $(cat resume.err)"
cmp a.jsonl b.jsonl || fail "the resumed run's metrics differ from the straight run's"
"$omni_ckpt" verify B/latest >/dev/null || fail "the resumed run's last checkpoint does not verify"
# The loss goes down (the model learns): mean of the last 5 steps below 60% of the first 5.
awk -F'"loss": ' '{ split($2, a, ","); l[NR] = a[1] } END {
  for (i = 1; i <= 5; i++) { f += l[i]; t += l[NR - 5 + i] }
  if (t >= 0.6 * f) { printf "no learning: first %g last %g\n", f / 5, t / 5; exit 1 } }' a.jsonl ||
  fail "the loss did not decrease"

# SIGTERM: checkpoint at the next step boundary, exit 143.
"$demo" --steps 100000000 --global-batch 64 --micro-batch 8 --ckpt T --metrics t.jsonl &
pid=$!
for _ in $(seq 100); do [ -s t.jsonl ] && break; sleep 0.05; done
kill -TERM "$pid"
rc=0; wait "$pid" || rc=$?
[ "$rc" = 143 ] || fail "exit status after SIGTERM: $rc, expected 143"
last=$(tail -n 1 t.jsonl | sed 's/.*"step": \([0-9]*\).*/\1/')
"$omni_ckpt" ls --json T | grep -q "\"step\": *$last" || fail "no checkpoint of step $last after SIGTERM"

# Bad options: exit 2 and a message naming the option.
# Negative numbers are refused, not wrapped to 2^64 - N (--steps -3 trained without end).
for bad in "--global-batch 0" "--global-batch 4096" "--micro-batch 3" "--steps 0" \
           "--ckpt-every 5" "--lr -1" "--steps abc" "--no-such-option" "--steps -3" \
           "--pace-ms -1" "--warmup -1" "--seed -1" "--ckpt-every -1" "--global-batch -64"; do
  rc=0
  # shellcheck disable=SC2086
  timeout 20 "$demo" $bad >out 2>err || rc=$?
  [ "$rc" = 2 ] || fail "'$bad': exit $rc, expected 2"
  opt=${bad%% *}
  grep -qe "${opt#--}" err || fail "'$bad': message does not name ${opt}: $(cat err)"
done
echo "ok: resume is bitwise identical, SIGTERM checkpoints, bad options refused"
