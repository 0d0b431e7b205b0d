"""The omni module across processes: real Gloo ranks under a real coordinator
(runtime_coord_serve, from libomni's tests), no Slurm. Two cases:
 - shrink: 2 units, a planned reshape to 1: unit 1 gets LEFT, unit 0 RESHAPED, then STOP;
 - grow: 2 units, a planned reshape to 3: a third process joins at a boundary and receives
   the parameters (as the survivors hold them at that step, not its own zeros) and its
   optimizer-state shard.
Checked from the ranks' own logs, against what holds independently of libomni's code: a
sum of (rank + 1) over n ranks is n(n+1)/2; an allgather of ranks is 0..n-1; the broadcast
value is root 0's; every step's samples over all ranks are B distinct indices and no index
repeats within the epoch; each optimizer-state shard holds its own global positions after
every re-partition; every rank's parameters equal the step count."""

import shutil
import tempfile
import unittest

import coord_job

B = 24


@unittest.skipUnless(coord_job.serve_built(),
                     "runtime_coord_serve is not built (make -C launcher check builds it; set OMNI_COORD_SERVE)")
class Ranks(unittest.TestCase):
    def run_job(self, units, target, **kw):
        d = tempfile.mkdtemp(prefix="omni-py-ranks.")
        self.addCleanup(shutil.rmtree, d, True)
        return coord_job.run_job(self, d, "rank_worker.py", [], units, target, seconds=90, **kw)

    def check_common(self, ranks):
        steps = {}
        for events in ranks:
            for e in events:
                if e["event"] != "step":
                    continue
                n = e["world"]
                self.assertEqual(e["total"], n * (n + 1) / 2, e)
                self.assertEqual(e["exact"], n * 2**40 + n * (n - 1) // 2, e)
                self.assertEqual(e["gathered"], [float(r) for r in range(n)], e)
                self.assertEqual(e["bcast"], 100.0, e)
                self.assertEqual(e["scattered"], [float(n)] * 2, e)
                self.assertEqual(e["param"], float(e["step"]), e)
                self.assertEqual(e["shard"], [float(e["shard_begin"] + i) for i in range(len(e["shard"]))], e)
                steps.setdefault(e["step"], []).extend(i for micro in e["samples"] for i in micro)
        everything = []
        for step, samples in sorted(steps.items()):
            self.assertEqual(len(samples), B, step)
            self.assertEqual(len(set(samples)), B, step)
            everything.extend(samples)
        self.assertEqual(len(everything), len(set(everything)), "a sample repeated within the epoch")
        closed = [e["error"] for events in ranks for e in events if e["event"] == "closed"]
        self.assertEqual(len(closed), len(ranks))
        self.assertTrue(all(c.startswith("rank(): ") for c in closed), closed)
        return steps

    def test_shrink(self):
        ranks, seen = self.run_job(2, 1)
        self.assertIn("generation 2 world 1", seen)
        kinds = [[e["kind"] for e in events if e["event"] == "boundary"] for events in ranks]
        self.assertEqual(kinds[1][-1], "left")
        self.assertIn("reshaped", kinds[0])
        self.assertEqual(kinds[0][-1], "stop")
        self.check_common(ranks)

    def test_lost_rank_fails_every_collective_at_once(self):
        # 4 ranks; unit 3 dies before its first collective. Units 0, 1 and 2 wait in an
        # allreduce: the failure must reach all of them well before the 60 s collective
        # timeout (libomni closes a failed rank's connections, so a rank waiting on it fails
        # too: a ring tells only the dead rank's neighbours), and they rewind together at the
        # boundary as the 3 survivors. Without that, unit 1 (no neighbour of unit 3) waits
        # until the boundary timeout has declared it lost as well.
        ranks, codes = self.run_job(4, 4, extra_env={"OMNI_TEST_EXPECT_LOSS": "1"},
                                    per_unit_env={3: {"OMNI_TEST_DIE_AT": "1"}}, serve_stops=False)
        self.assertEqual(codes[:3], [0, 0, 0])
        for events in ranks[:3]:
            err = [e for e in events if e["event"] == "comm-error"]
            self.assertEqual(len(err), 1, events)
            self.assertLess(err[0]["seconds"], 10, err)
            b = [e for e in events if e["event"] == "boundary"][0]
            self.assertEqual((b["kind"], b["world"]), ("rewind", 3), events)

    def test_grow(self):
        ranks, seen = self.run_job(2, 3, joiners=1)
        self.assertIn("generation 2 world 3", seen)
        start = [e for e in ranks[2] if e["event"] == "start"][0]
        self.assertGreater(start["step"], 0)
        # The joiner's parameters are the survivors' at the step it joined (they add 1 a step
        # from zeros), not the zeros it registered.
        self.assertEqual(start["params"], [float(start["step"])] * 10)
        self.assertFalse(start["rewind"])
        self.assertEqual(start["shard"], [float(start["shard_begin"] + i) for i in range(len(start["shard"]))])
        self.check_common(ranks)


if __name__ == "__main__":
    unittest.main(verbosity=2)
