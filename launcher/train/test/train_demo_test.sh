#!/usr/bin/env bash
# omni-train-demo standalone: a run resumed from a checkpoint is bitwise the same as one that
# never stopped, also with other micro-batches; a resume with another data order or LR
# schedule is refused; the job's --omni-* values are the defaults; SIGTERM checkpoints and
# exits 143; bad options exit 2 naming the option.
set -euo pipefail
demo=${OMNI_TRAIN_DEMO:?set by make check}
omni_ckpt=${OMNI_CKPT:?set by make check}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
# Not inside anybody's job: the --omni-* values of one would become the trainer's defaults.
unset OMNI_COORD_ADDR OMNI_COORD_SECRET OMNI_JOB_DIR OMNI_ELASTIC_MIN OMNI_ELASTIC_MAX OMNI_UNIT_SIZE \
      OMNI_UNIT_DOMAIN OMNI_MP OMNI_GLOBAL_BATCH OMNI_MICRO_BATCH OMNI_SM_SLICE OMNI_CKPT_DIR OMNI_CKPT_EVERY

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
# A run resumed with other micro-batches (GA 4 instead of 8) is still bitwise the same.
cp -r A C
rm -rf C/step-0000000075 C/step-0000000100
cp a.jsonl c.jsonl
"$demo" --steps 100 --global-batch 64 --micro-batch 16 --lr 0.05 --ckpt C --ckpt-every 25 --metrics c.jsonl 2>resume.err
grep -q "resumed at step 50" resume.err || fail "--micro-batch 16 did not resume at step 50: $(cat resume.err)"
cmp a.jsonl c.jsonl || fail "the run resumed with --micro-batch 16 differs from the straight run"
# Another data order or LR schedule is refused (exit 1, naming the option and both values),
# and the checkpoints and metrics stay as they were.
before=$(ls C; cat c.jsonl)
for bad in "--seed 2|seed is 1, this run's 2" "--global-batch 128|global batch is 64, this run's 128" \
           "--dataset-size 1000|dataset size is 131072, this run's 1000" \
           "--steps 120|--steps 120: the checkpoint's LR schedule has a total of 100 steps" \
           "--warmup 5|--warmup 5: the checkpoint's LR schedule has 20 warmup steps" \
           "--lr 0.06|--lr 0.06: the checkpoint's LR schedule has a peak LR of 0.05"; do
  opt=${bad%%|*} want=${bad#*|}
  args="--steps 100 --global-batch 64 --micro-batch 8 --lr 0.05 --ckpt C --ckpt-every 25 --metrics c.jsonl"
  case " $args " in
    *" ${opt%% *} "*) args=$(echo "$args" | sed "s/${opt%% *} [^ ]*/$opt/") ;;
    *) args="$args $opt" ;;
  esac
  rc=0
  # shellcheck disable=SC2086
  "$demo" $args 2>err || rc=$?
  [ "$rc" = 1 ] || fail "resuming with $opt: exit $rc, expected 1: $(cat err)"
  grep -qF -- "$want" err || fail "resuming with $opt: the message does not say '$want': $(cat err)"
  [ "$(ls C; cat c.jsonl)" = "$before" ] || fail "resuming with $opt changed the checkpoints or the metrics"
done
# The checkpoint's metadata carries the ledger's epoch and seed: 20 steps of 64 samples of a
# 1000-sample dataset end in epoch 1 (1280 / 1000).
"$demo" --steps 20 --dataset-size 1000 --seed 5 --ckpt E --ckpt-every 20 >/dev/null
"$omni_ckpt" show --json E/latest >show.json
python3 -c 'import json, sys; l = json.load(open("show.json"))["ledger"]
sys.exit(0 if l == {"epoch": 20 * 64 // 1000, "seed": 5} else "ledger in the metadata: %s" % l)' ||
  fail "omni-ckpt show does not give the ledger's epoch and seed"
# The loss goes down (the model learns): mean of the last 5 steps below 60% of the first 5.
awk -F'"loss": ' '{ split($2, a, ","); l[NR] = a[1] } END {
  for (i = 1; i <= 5; i++) { f += l[i]; t += l[NR - 5 + i] }
  if (t >= 0.6 * f) { printf "no learning: first %g last %g\n", f / 5, t / 5; exit 1 } }' a.jsonl ||
  fail "the loss did not decrease"

# In a job submitted with --omni-global-batch, --omni-micro-batch and --omni-ckpt, the job's
# OMNI_* values are the defaults: 32 samples a step, checkpoints every 10 steps in J.
mkdir J
OMNI_GLOBAL_BATCH=32 OMNI_MICRO_BATCH=4 OMNI_CKPT_DIR="$work/J" OMNI_CKPT_EVERY=10 \
  "$demo" --steps 20 --metrics j.jsonl
grep -q '"step": 20,.*"samples": 640,.*"step_samples": \[32,' j.jsonl || fail "the job's global batch 32 was not used: $(tail -n 1 j.jsonl)"
[ "$("$omni_ckpt" ls --json J | grep -c '"complete": true')" = 2 ] || fail "no checkpoints of steps 10 and 20 in OMNI_CKPT_DIR: $("$omni_ckpt" ls J)"
# An option on the command line wins, with a note naming both.
OMNI_GLOBAL_BATCH=32 OMNI_MICRO_BATCH=4 "$demo" --steps 2 --global-batch 64 --metrics k.jsonl 2>err
grep -q '"step_samples": \[64,' k.jsonl || fail "--global-batch 64 did not win over OMNI_GLOBAL_BATCH=32"
grep -q "note: --global-batch 64 overrides the job's --omni-global-batch=32" err || fail "no note of the override: $(cat err)"
# A job's global batch this trainer cannot take, or a micro-batch that does not divide it:
# exit 2 naming the variable.
rc=0; OMNI_GLOBAL_BATCH=4096 "$demo" --steps 2 2>err || rc=$?
[ "$rc" = 2 ] && grep -q "OMNI_GLOBAL_BATCH (sbatch --omni-global-batch) 4096" err || fail "OMNI_GLOBAL_BATCH=4096: exit $rc: $(cat err)"
rc=0; OMNI_GLOBAL_BATCH=36 OMNI_MICRO_BATCH=8 "$demo" --steps 2 2>err || rc=$?
[ "$rc" = 2 ] && grep -q -- "--omni-global-batch=36: not divisible by --omni-micro-batch=8" err ||
  fail "OMNI_MICRO_BATCH=8 with OMNI_GLOBAL_BATCH=36: exit $rc: $(cat err)"
# The job's global batch with the trainer's default micro-batch 8 that does not divide it.
rc=0; OMNI_GLOBAL_BATCH=36 OMNI_MICRO_BATCH=6 "$demo" --steps 2 --micro-batch 8 2>err || rc=$?
[ "$rc" = 2 ] && grep -q -- "--micro-batch 8: expected a divisor of OMNI_GLOBAL_BATCH (sbatch --omni-global-batch) 36" err ||
  fail "--micro-batch 8 with OMNI_GLOBAL_BATCH=36: exit $rc: $(cat err)"

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
# --balance, --workload, --cost, --pace-ns-per-token: bad values and a policy without a
# workload exit 2 naming the option; a workload file with a bad field names the field.
printf '{"modalities": [{"name": "text", "length": {"fixed": 0}}], "phases": [{"mix": {"text": 1}}]}' >bad-workload.json
for bad in "--balance greedy|--balance" "--balance kk|--balance kk needs --workload" \
           "--pace-ns-per-token 5|--pace-ns-per-token needs --workload" "--cost frames --workload paper|--cost" \
           "--workload no-such-file.json|--workload no-such-file.json" \
           "--workload bad-workload.json|modalities[0].length.fixed"; do
  args=${bad%%|*} want=${bad#*|}
  rc=0
  # shellcheck disable=SC2086
  timeout 20 "$demo" --steps 2 $args >out 2>err || rc=$?
  [ "$rc" = 2 ] || fail "'$args': exit $rc, expected 2: $(cat err)"
  grep -qF -- "$want" err || fail "'$args': the message does not say '$want': $(cat err)"
done
# One rank balancing its own step changes nothing: the same metrics as without --balance,
# with the step's cost in them.
"$demo" --steps 5 --global-batch 16 --micro-batch 4 --workload paper --metrics w1.jsonl
"$demo" --steps 5 --global-batch 16 --micro-batch 4 --workload paper --balance grouped --metrics w2.jsonl
cmp w1.jsonl w2.jsonl || fail "--balance grouped changed a single rank's metrics"
grep -q '"cost": \[[0-9]*, [0-9]*\]' w1.jsonl || fail "no cost in the metrics of a --workload run: $(head -n 1 w1.jsonl)"
echo "ok: resume is bitwise identical (also with other micro-batches), other data orders and LR schedules refused, the job's OMNI_* defaults taken, SIGTERM checkpoints, bad options refused"
