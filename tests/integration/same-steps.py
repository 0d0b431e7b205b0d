#!/usr/bin/env python3
"""Checks that a run trained the same steps as a reference run, bitwise.

Reads two omni-train-demo --metrics files (one JSON line per step) and requires the run to
have every step 1..N exactly once, in order (a rewind that retrained steps writes them again),
with the reference's loss, LR, samples and per-step sample count at every step: json keeps all
17 digits, so equal floats are bitwise equal. Prints the run's world sizes as they changed.

Usage: same-steps.py REFERENCE RUN [STEPS]   (STEPS: the length both must have, default the
reference's)
Exit 0 when they match, 1 (saying where) when not, 2 on bad usage or unreadable input.
"""
import json
import sys


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main(argv):
    if len(argv) not in (3, 4):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        ref, run = load(argv[1]), load(argv[2])
        steps = int(argv[3]) if len(argv) == 4 else len(ref)
    except (OSError, ValueError) as e:
        print("same-steps: %s" % e, file=sys.stderr)
        return 2
    if len(ref) != steps:
        print("same-steps: the reference has %d steps, expected %d" % (len(ref), steps))
        return 1
    got = [m["step"] for m in run]
    if got != list(range(1, steps + 1)):
        print("same-steps: the run's steps are not 1..%d once each: %s" % (steps, got))
        return 1
    key = lambda m: (m["step"], m["loss"], m["lr"], m["samples"], tuple(m["step_samples"]))
    for a, b in zip(ref, run):
        if key(a) != key(b):
            print("same-steps: step %d differs:\n  reference %s\n  run       %s" % (a["step"], a, b))
            return 1
    worlds = [m["world"] for m in run]
    seq = [w for i, w in enumerate(worlds) if i == 0 or worlds[i - 1] != w]
    print("same-steps: %d steps bitwise equal, none twice; worlds %s" % (steps, seq))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
