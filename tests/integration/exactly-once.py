#!/usr/bin/env python3
"""Checks that every epoch of a training run used each sample exactly once, as sets.

Reads the files that omni-train-demo --sample-log DIR wrote (one per rank process, a line
"STEP GENERATION I I ..." per step trained). A step trained again after a rewind carries a
higher generation than its lost first run: only the lines of a step's highest generation
count. Then, for each epoch (STEPS_PER_EPOCH consecutive steps from step 1), the indices of
its steps, gathered over all ranks, must be exactly 0..D-1, each once.

Usage: exactly-once.py DIR D STEPS_PER_EPOCH STEPS
Exit 0 when it holds, 1 (with what is wrong) when not, 2 on bad usage or unreadable input.
"""
import collections
import glob
import os
import sys


def main(argv):
    if len(argv) != 5:
        print(__doc__.strip().splitlines()[-3], file=sys.stderr)
        return 2
    d, n, per_epoch, steps = argv[1], int(argv[2]), int(argv[3]), int(argv[4])
    files = sorted(glob.glob(os.path.join(d, "*.samples")))
    if not files:
        print("exactly-once: no *.samples files in %s" % d, file=sys.stderr)
        return 2
    # step -> generation -> indices from every rank of that generation
    by_step = collections.defaultdict(lambda: collections.defaultdict(list))
    for f in files:
        with open(f) as fh:
            for ln, line in enumerate(fh, 1):
                parts = line.split()
                if len(parts) < 2:
                    print("exactly-once: %s:%d: expected 'STEP GENERATION I...': %r" % (f, ln, line), file=sys.stderr)
                    return 2
                step, gen = int(parts[0]), int(parts[1])
                by_step[step][gen].extend(int(i) for i in parts[2:])
    if sorted(by_step) != list(range(1, steps + 1)):
        missing = sorted(set(range(1, steps + 1)) - set(by_step))
        extra = sorted(set(by_step) - set(range(1, steps + 1)))
        print("exactly-once: steps missing %s, unexpected %s" % (missing[:10], extra[:10]))
        return 1
    redone = sum(1 for s in by_step if len(by_step[s]) > 1)
    bad = []
    for e in range(steps // per_epoch):
        got = collections.Counter()
        for s in range(e * per_epoch + 1, (e + 1) * per_epoch + 1):
            gens = by_step[s]
            got.update(gens[max(gens)])
        twice = sorted(i for i, c in got.items() if c > 1)
        outside = sorted(i for i in got if not 0 <= i < n)
        unused = n - len([i for i in got if 0 <= i < n])
        if twice or outside or unused:
            bad.append("epoch %d: %d samples used more than once (first %s), %d outside 0..%d (%s), %d unused"
                       % (e, len(twice), twice[:5], len(outside), n - 1, outside[:5], unused))
    if bad:
        print("exactly-once: " + "; ".join(bad))
        return 1
    print("exactly-once: %d epochs of %d samples, each sample once per epoch (%d rank files, %d steps redone after a rewind)"
          % (steps // per_epoch, n, len(files), redone))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
