#!/usr/bin/env python3
"""Checks the model-parallel layout an omni-train-demo run recorded with --layout-log.

Every rank wrote "STEP GENERATION UNIT SLOT MP_RANK MP_SIZE DP_RANK DP_SIZE FINGERPRINT" per
step. For every step this requires, from the rule libomni(3) states (a unit of N ranks holds
N/M replicas of M ranks: MP index slot % M, replica slot // M):
  - every rank has MP size M and MP index slot % M;
  - the M ranks of one replica (unit, slot // M) share one DP rank, and the DP ranks of each
    MP index are 0..D-1 once each, D = units x N / M;
  - every DP rank of one MP index holds the same parameters (one fingerprint per index).
Prints the DP sizes the run went through.

Usage: mp-layout.py DIR N M STEPS
Exit 0 when every step holds, 1 (saying where) when not, 2 on bad usage or unreadable input.
"""
import collections
import glob
import os
import sys


def main(argv):
    if len(argv) != 5:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        n, m, steps = int(argv[2]), int(argv[3]), int(argv[4])
        rows = collections.defaultdict(list)
        for path in glob.glob(os.path.join(argv[1], "*.layout")):
            with open(path) as f:
                for line in f:
                    v = line.split()
                    if len(v) != 9:
                        raise ValueError("%s: malformed line %r" % (path, line))
                    rows[int(v[0])].append([int(x) for x in v[1:8]] + [v[8]])
    except (OSError, ValueError) as e:
        print("mp-layout: %s" % e, file=sys.stderr)
        return 2
    bad = []
    dp_sizes = []
    for step in range(1, steps + 1):
        got = rows.get(step, [])
        if not got:
            bad.append("step %d: no rank recorded it" % step)
            continue
        units = sorted({r[1] for r in got})
        d = len(units) * n // m
        if not dp_sizes or dp_sizes[-1] != d:
            dp_sizes.append(d)
        by_index = collections.defaultdict(list)
        by_replica = collections.defaultdict(list)
        for gen, unit, slot, mp_rank, mp_size, dp_rank, dp_size, fp in got:
            if mp_size != m or mp_rank != slot % m or dp_size != d:
                bad.append("step %d: unit %d slot %d has MP %d of %d, DP size %d; expected MP %d of %d, DP size %d"
                           % (step, unit, slot, mp_rank, mp_size, dp_size, slot % m, m, d))
            by_index[mp_rank].append((dp_rank, fp))
            by_replica[(unit, slot // m)].append((mp_rank, dp_rank))
        for idx, members in sorted(by_index.items()):
            if sorted(r for r, _ in members) != list(range(d)):
                bad.append("step %d: MP index %d has DP ranks %s, expected 0..%d once each"
                           % (step, idx, sorted(r for r, _ in members), d - 1))
            if len({fp for _, fp in members}) != 1:
                bad.append("step %d: the DP ranks of MP index %d hold different parameters: %s"
                           % (step, idx, sorted({fp for _, fp in members})))
        for (unit, rep), members in sorted(by_replica.items()):
            if sorted(i for i, _ in members) != list(range(m)) or len({r for _, r in members}) != 1:
                bad.append("step %d: replica %d of unit %d is %s (MP index, DP rank), expected MP 0..%d on one DP rank"
                           % (step, rep, unit, sorted(members), m - 1))
    if bad:
        for b in bad[:20]:
            print("mp-layout: " + b)
        print("mp-layout: %d problem(s)" % len(bad))
        return 1
    print("mp-layout: %d steps, M=%d, N=%d: groups as the rule says, every slice's DP ranks agree; DP sizes %s"
          % (steps, m, n, dp_sizes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
