#!/usr/bin/env bash
# omni-sim's commands: --help, bad options exit 2 naming the option, the balance table has a
# row per scale and policy with none's VS-NONE 1 and a uniform workload balanced already;
# the workload generator's JSON reads back to itself; --stats draws the preset's mix; predict
# agrees with a standalone omni-train-demo run's own costs and catches one changed cost.
set -euo pipefail
sim=${OMNI_SIM:?set by make check}
demo=${OMNI_TRAIN_DEMO:?set by make check}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
unset OMNI_COORD_ADDR OMNI_COORD_SECRET OMNI_JOB_DIR OMNI_GLOBAL_BATCH OMNI_MICRO_BATCH OMNI_MP

for c in "" balance lssp insertion system predict workload; do
  # shellcheck disable=SC2086
  "$sim" $c --help >out 2>&1 || fail "omni-sim $c --help: exit $?"
  grep -q "Usage: omni-sim" out || fail "omni-sim $c --help: no usage: $(head -n 3 out)"
done
for bad in "|COMMAND" "frobnicate|unknown command 'frobnicate'" "balance --gpus 0|--gpus" "balance --gpus 12|--gpus 12" \
            "balance --policies greedy|--policies" "balance --mp 3|--mp 3" "balance --steps -1|--steps" \
            "balance --workload nope.json|--workload nope.json" "balance --cost frames|--cost" \
            "predict|--metrics" "predict --metrics x --balance kk:rack|--balance" "workload --samples 0|--samples" \
            "balance --bogus|bogus" "lssp --max-degree 3|--max-degree 3" "lssp --gpus 12|--gpus 12" \
            "lssp --memory-tokens 0|--memory-tokens" "lssp --sp-comm -1|--sp-comm" \
            "insertion --layouts sideways|--layouts" "insertion --stages 0|--stages" \
            "insertion --samples-per-micro-batch 0|--samples-per-micro-batch" \
            "system --gpus 12|--gpus 12" "system --systems megatron|--systems" \
            "system --batch-per-replica 4|--batch-per-replica 4" "system --max-degree 3|--max-degree 3" \
            "system --transfer -1|--transfer" "system --stages 0|--stages" "system --skew 0|--skew" \
            "system --skew 2 --systems omni|no static system" "system --plot y.png --systems reorder|--plot" \
            "system --workload text --skew 2|one modality"; do
  args=${bad%%|*} want=${bad#*|}
  rc=0
  # shellcheck disable=SC2086
  "$sim" $args >out 2>&1 || rc=$?
  [ "$rc" = 2 ] || fail "omni-sim $args: exit $rc, expected 2: $(cat out)"
  grep -qF -- "$want" out || fail "omni-sim $args: the message does not say '$want': $(cat out)"
done

# The table: 2 scales x 3 policies; none against itself is 1.000; every sample the same
# length leaves nothing to balance (imbalance 1).
"$sim" balance --gpus 16,32 --policies none,kk,grouped --steps 5 --csv t.csv >t.txt
[ "$(grep -cE '^ +(16|32) +(16|32) +(none|kk|grouped) ' t.txt)" = 6 ] || fail "expected 6 rows: $(cat t.txt)"
awk '$3 == "none" && $10 != "1.000" { exit 1 }' t.txt || fail "none's VS-NONE is not 1: $(cat t.txt)"
[ "$(wc -l <t.csv)" = 7 ] || fail "the CSV has $(wc -l <t.csv) lines, expected 7"
"$sim" balance --workload uniform --gpus 16 --steps 3 >u.txt
awk '$1 == 16 && $5 != "1.0000" { exit 1 }' u.txt || fail "a uniform workload is imbalanced: $(cat u.txt)"

# LSSP: with memory for every sample, the four policies run; LSSP's makespan is the
# smallest (it may split nothing, so it is never slower than whole samples placed freely);
# with a small memory the whole-sample policies run out of it on some steps.
"$sim" lssp --gpus 16 --steps 4 --memory-tokens 300000 >l.txt
[ "$(grep -cE '^ +16 +16 +(none|kk|static-sp|lssp) ' l.txt)" = 4 ] || fail "lssp: expected 4 rows: $(cat l.txt)"
awk '$3 == "lssp" { l = $4 } $1 == 16 && $3 != "lssp" { if ($4 > m) m = $4; if (min == "" || $4 < min) min = $4 }
     END { exit !(l > 0 && l <= min) }' l.txt || fail "lssp is slower than a whole-sample policy: $(cat l.txt)"
"$sim" lssp --gpus 16 --steps 4 --memory-tokens 4096 --max-degree 16 >m.txt
awk '$3 == "none" && $4 == "-" && $9 > 0 { found = 1 } END { exit !found }' m.txt || fail "lssp: no OOM steps for none at 4096 tokens: $(cat m.txt)"

# Insertion: five layouts; the uniform schedule as JSON holds every op once (2 LLM ops per
# stage and micro-batch, an encoder forward and backward per micro-batch) and is no slower
# per GPU than all encoder work in front of stage 0.
"$sim" insertion --stages 4 --micro-batches 8 --schedule s.json >i.txt
[ "$(grep -cE '^(none|front|first-stage|encoder-stage\([0-9]+\)|uniform) ' i.txt)" = 5 ] || fail "insertion: expected 5 rows: $(cat i.txt)"
awk '$1 == "front" { f = $5 } $1 == "uniform" { u = $5 } END { exit !(u >= f) }' i.txt || fail "uniform is slower than front: $(cat i.txt)"
/usr/bin/python3 - s.json <<'PY' || fail "the uniform schedule (above)"
import collections, json, sys
s = json.load(open(sys.argv[1]))
ops = collections.Counter((o["op"], o["micro"]) for st in s["stages"] for o in st)
assert s["gpus"] == 4 and len(s["stages"]) == 4, s["gpus"]
for j in range(8):
    assert ops[("F", j)] == 4 and ops[("B", j)] == 4, (j, ops)
    assert ops[("EF", j)] == 1 and ops[("EB", j)] == 1, (j, ops)
for st in s["stages"]:
    assert all(a["end"] <= b["start"] + 1e-6 for a, b in zip(st, st[1:])), "overlap"
PY

# The whole system: 2 scales x 5 systems, the best static system at VS-STATIC 1.000, the
# paper's speedup beside omni's row only, a CSV row each, peak memory for every stage (and
# the encoder stage); the paper's mix gains over the static systems at both scales. On a
# workload of one length and no encoders nothing differs: every system but the encoder
# stage (which has GPUs of its own) takes the same step time.
"$sim" system --gpus 64,128 --steps 3 --csv y.csv --stage-memory >y.txt
[ "$(grep -cE '^ +(64|128) +(8|16) +(static-first|static-stage\([0-9]\)|multiplex|reorder|omni) ' y.txt)" = 10 ] ||
  fail "system: expected 10 rows: $(cat y.txt)"
awk '$3 ~ /^static/ { if ($12 > m[$1]) m[$1] = $12 } END { exit !(m[64] == "1.000" && m[128] == "1.000") }' y.txt ||
  fail "system: the best static system is not at 1.000: $(cat y.txt)"
awk '$1 == 64 && $3 == "omni" && $13 == "1.54" { a = 1 } $1 == 128 && $3 == "omni" && $13 == "3.30" { b = 1 }
     NF == 13 && $3 != "omni" && $1 ~ /^[0-9]+$/ && $13 != "-" { bad = 1 } $3 == "omni" && $12 <= 1.0 { bad = 1 }
     END { exit !(a && b && !bad) }' y.txt || fail "system: the paper column or omni's gain: $(cat y.txt)"
[ "$(wc -l <y.csv)" = 11 ] || fail "system: the CSV has $(wc -l <y.csv) lines, expected 11"
[ "$(grep -cE '^  (64|128) static-stage\([0-9]\):( [0-9]+){9}$' y.txt)" = 2 ] &&
  [ "$(grep -cE '^  (64|128) (static-first|multiplex|reorder|omni):( [0-9]+){8}$' y.txt)" = 8 ] ||
  fail "system: peak memory per stage: $(cat y.txt)"
"$sim" system --workload uniform --gpus 64 --steps 2 >yu.txt
awk '$1 == 64 && $3 !~ /^static-stage/ { t[$5] = 1; n++ } END { c = 0; for (k in t) c++; exit !(n == 4 && c == 1) }' yu.txt ||
  fail "system: one length and no encoders, yet the step times differ: $(cat yu.txt)"

# Plots (gnuplot, which scripts/install-deps installs): each command's --plot writes a PNG;
# one that cannot be written fails naming it.
png() { [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] && [ "$(wc -c <"$1")" -gt 4000 ]; }
"$sim" balance --gpus 16,32 --steps 3 --plot b.png >/dev/null && png b.png || fail "balance --plot wrote no PNG"
"$sim" lssp --gpus 16,32 --steps 2 --memory-tokens 300000 --plot l.png >/dev/null && png l.png || fail "lssp --plot wrote no PNG"
"$sim" insertion --stages 4 --micro-batches 8 --plot i.png >/dev/null && png i.png || fail "insertion --plot wrote no PNG"
"$sim" system --gpus 64,128 --steps 2 --plot y.png >/dev/null && png y.png || fail "system --plot wrote no PNG"
rc=0; "$sim" balance --gpus 16 --steps 1 --plot /nonexistent/dir/b.png >out 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q -- "--plot /nonexistent/dir/b.png" out || fail "an unwritable --plot: exit $rc: $(cat out)"

# The generator: a preset as JSON, read back to the same JSON.
"$sim" workload --workload paper >paper.json
"$sim" workload --workload paper.json >again.json
cmp paper.json again.json || fail "the paper preset's JSON does not read back to itself"
# Phase 0 of the paper preset: 70% text, 25% images, 5% audio.
"$sim" workload --stats --samples 40000 >stats.txt
for want in "text 0.70" "image 0.25" "audio 0.05"; do
  set -- $want
  awk -v m="$1" -v s="$2" '$1 == 0 && $3 == m { d = $4 - s; if (d < -0.01 || d > 0.01) exit 1; found = 1 }
                           END { exit !found }' stats.txt || fail "phase 0's share of $1 is not about $2: $(cat stats.txt)"
done

# predict: one rank's run has every step's cost in its metrics; the model agrees with each,
# and a run with one changed cost is caught (exit 1, naming the step).
"$demo" --steps 6 --global-batch 16 --micro-batch 4 --seed 5 --workload paper --timestamps --metrics run.jsonl
"$sim" predict --metrics run.jsonl --global-batch 16 --seed 5 >p.txt || fail "predict: $(cat p.txt)"
grep -q "cost checked on 6: 0 differ" p.txt || fail "predict: $(cat p.txt)"
sed '3s/"cost": \[\([0-9]*\)/"cost": [1\1/' run.jsonl >bad.jsonl
rc=0; "$sim" predict --metrics bad.jsonl --global-batch 16 --seed 5 >p.txt 2>err || rc=$?
[ "$rc" = 1 ] && grep -q "step 3: the run's cost" err || fail "a changed cost: exit $rc: $(cat err p.txt)"
rc=0; "$sim" predict --metrics run.jsonl --global-batch 16 --seed 6 >p.txt 2>err || rc=$?
[ "$rc" = 1 ] || fail "predict with another seed agreed with the run"
echo "ok: omni-sim help, usage errors, balance, lssp, insertion and system tables and plots, workload generator and stats, predict"
