"""The omni module in one process: the runtime standalone (no coordinator, world 1), the
stand-alone ledger, checkpoints written and read back (and by omni-ckpt and h5py), and
misuse, each refused with an exception that names what was wrong while the interpreter and
the runtime go on. Run by make check with the build tree's package on PYTHONPATH."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

# No coordinator, no PMIx, no Slurm: the runtime runs standalone.
for _name in list(os.environ):
    if _name.startswith(("OMNI_", "PMIX_", "SLURM_")):
        del os.environ[_name]

import omni  # noqa: E402

try:
    import torch
except ImportError:  # Debian's python3-torch; scripts/install-deps installs it
    torch = None

BUILD = os.environ.get("OMNI_TOP_BUILDDIR") or os.path.join(os.path.dirname(__file__), "..", "..", "build")


class A_BeforeInit(unittest.TestCase):
    """Runs first (unittest orders classes by name): nothing is initialised yet."""

    def test_calls_before_init_are_state_errors(self):
        for call in (omni.rank, omni.world_size, omni.generation, lambda: omni.boundary(1), omni.start,
                     omni.check_member, omni.sockets_begin):
            with self.assertRaises(omni.StateError) as cm:
                call()
            self.assertIn("omni_init", str(cm.exception))
        self.assertIsNone(omni.backend())
        self.assertTrue(issubclass(omni.StateError, omni.Error))
        self.assertTrue(issubclass(omni.InvalidArgument, ValueError))
        self.assertTrue(issubclass(omni.CheckpointError, OSError))


class B_Standalone(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        omni.init()
        cls.params = np.arange(12, dtype=np.float32)
        omni.register_params(cls.params)
        cls.m = omni.state_add(12)
        omni.data_configure(96, 7, 8, 2)
        cls.step, cls.rewind = omni.start()

    def test_identity(self):
        self.assertEqual((omni.rank(), omni.world_size()), (0, 1))
        self.assertTrue(omni.standalone())
        self.assertEqual(omni.backend(), "solo")
        self.assertEqual(omni.group_info(omni.DP), (0, 1))
        self.assertEqual(omni.group_info(omni.WORLD), (0, 1))
        self.assertEqual((self.step, self.rewind), (0, False))

    def test_collectives_on_one_rank(self):
        a = np.array([1.5, -2.0, 3.25], dtype=np.float32)
        omni.allreduce(a)
        np.testing.assert_array_equal(a, [1.5, -2.0, 3.25])
        omni.allreduce(a, op="avg")
        np.testing.assert_array_equal(a, [1.5, -2.0, 3.25])
        recv = np.zeros(3, dtype=np.float32)
        omni.allgather(a, recv)
        np.testing.assert_array_equal(recv, a)
        omni.broadcast(a, root=0)
        omni.barrier()
        big = np.array([2**40 + 1, -7], dtype=np.int64)
        omni.allreduce(big)
        np.testing.assert_array_equal(big, [2**40 + 1, -7])
        with self.assertRaisesRegex(omni.InvalidArgument, "OMNI_INT64 takes OMNI_SUM only"):
            omni.allreduce(big, op="avg")
        bf = np.array([0x3F80, 0x4000], dtype=np.uint16)  # bfloat16 1.0 and 2.0
        omni.allreduce(bf, dtype="bf16")
        np.testing.assert_array_equal(bf, [0x3F80, 0x4000])

    def test_state_shard_is_a_copy_in_and_out(self):
        begin, shard = omni.get_state_shard(self.m)
        self.assertEqual((begin, shard.shape), (0, (12,)))
        np.testing.assert_array_equal(shard, np.zeros(12, np.float32))
        omni.set_state_shard(self.m, np.full(12, 0.5, np.float32))
        np.testing.assert_array_equal(omni.get_state_shard(self.m)[1], np.full(12, 0.5, np.float32))
        with self.assertRaisesRegex(ValueError, "hold 3 elements; this rank's shard has 12"):
            omni.set_state_shard(self.m, np.zeros(3, np.float32))

    def test_data_and_boundary(self):
        self.assertEqual(omni.data_grad_accum(), 4)  # B / (b * d) = 8 / (2 * 1)
        seen = []
        for step in range(1, 13):  # one epoch: 96 / 8 steps
            for micro in range(omni.data_grad_accum()):
                batch = omni.data_micro_batch(micro)
                self.assertEqual(batch.dtype, np.uint64)
                seen.extend(batch.tolist())
            d = omni.boundary(step)
            self.assertEqual(d.kind, omni.CONTINUE)
            self.assertEqual(d.world, 1)
        # Every sample of the epoch exactly once (the ledger's guarantee, checked as sets).
        self.assertEqual(sorted(seen), list(range(96)))
        text = omni.data_save()
        self.assertIn("dataset_size", text)
        omni.data_load(text)
        with self.assertRaises(omni.InvalidArgument):
            omni.data_load("{not json")

    @unittest.skipIf(torch is None, "python3-torch is not installed (scripts/install-deps installs it)")
    def test_torch_tensors_through_dlpack(self):
        t = torch.tensor([1.0, 2.0, 4.0])
        omni.allreduce(t)
        self.assertEqual(t.tolist(), [1.0, 2.0, 4.0])
        b = torch.tensor([1.0, 2.0], dtype=torch.bfloat16)
        omni.allreduce(b, op="avg")
        self.assertEqual(b.tolist(), [1.0, 2.0])
        with self.assertRaisesRegex(ValueError, "C-contiguous"):
            omni.allreduce(torch.ones(4, 4).t())
        with self.assertRaisesRegex(TypeError, "float64; expected float32"):
            omni.allreduce(torch.ones(3, dtype=torch.float64))
        # The tensor is still usable afterwards (the export was released).
        t.add_(1.0)
        self.assertEqual(t.tolist(), [2.0, 3.0, 5.0])

    def test_misuse_is_refused_naming_what(self):
        a = np.ones(4, np.float32)
        with self.assertRaisesRegex(TypeError, r"allreduce\(\): buffer: float64; expected float32"):
            omni.allreduce(np.ones(4))
        with self.assertRaisesRegex(ValueError, "not C-contiguous"):
            omni.allreduce(np.ones(8, np.float32)[::2])
        ro = np.ones(4, np.float32)
        ro.setflags(write=False)
        with self.assertRaisesRegex(TypeError, "read-only"):
            omni.allreduce(ro)
        with self.assertRaisesRegex(TypeError, "a int is not a tensor"):
            omni.allreduce(5)
        with self.assertRaisesRegex(ValueError, "op 'max': expected 'sum' or 'avg'"):
            omni.allreduce(a, op="max")
        with self.assertRaises(omni.InvalidArgument):
            omni.allreduce(a, group=7)
        with self.assertRaisesRegex(ValueError, "degree: 0 is out of range"):
            omni.sp(0)
        with self.assertRaisesRegex(ValueError, "recv holds 5 elements; expected 1 x 4"):
            omni.allgather(a, np.zeros(5, np.float32))
        with self.assertRaisesRegex(ValueError, "step: -1 is negative"):
            omni.boundary(-1)
        with self.assertRaisesRegex(ValueError, "length: .* is out of range"):
            omni.state_add(2**80)
        with self.assertRaisesRegex(TypeError, "step: expected an integer, got a str"):
            omni.boundary("3")
        with self.assertRaisesRegex(TypeError, "float64; expected float32 in host memory"):
            omni.register_params(np.zeros(3))
        # The program's store needs a coordinator: standalone, a clear refusal.
        with self.assertRaisesRegex(omni.StateError, "standalone"):
            omni.store_set(0, "k", b"v")
        with self.assertRaisesRegex(ValueError, "amount: .* is beyond"):
            omni.store_add(0, "k", 2**70)
        with self.assertRaisesRegex(TypeError, "amount: expected an integer"):
            omni.store_add(0, "k", 1.5)
        with self.assertRaisesRegex(TypeError, "cost: expected a callable"):
            omni.data_balance("kk", 3)
        with self.assertRaises(omni.InvalidArgument):
            omni.data_balance("fastest", lambda i, s: 1)
        # A step out of sequence is refused by libomni, and the runtime goes on.
        with self.assertRaises(omni.InvalidArgument):
            omni.boundary(1000)
        omni.allreduce(a)
        np.testing.assert_array_equal(a, np.ones(4, np.float32))


class C_Ledger(unittest.TestCase):
    def test_exactly_once_through_resizes(self):
        led = omni.Ledger(96, 8, 2, 3, 2)
        self.assertEqual(led.grad_accum(), 2)
        seen, sizes = [], [2, 4, 1, 2]
        for step in range(12):
            if step % 3 == 0:
                led.resize(sizes[step // 3])
            d = {2: 2, 4: 1, 1: 4}[sizes[step // 3]]
            self.assertEqual(led.grad_accum(), d)
            for r in range(sizes[step // 3]):
                for micro in range(led.grad_accum()):
                    seen.extend(led.micro_batch(r, micro).tolist())
            led.commit_step()
        self.assertEqual(sorted(seen), list(range(96)))
        self.assertEqual(led.position(), (12, 1, 0))
        again = omni.Ledger.load(led.save())
        np.testing.assert_array_equal(again.micro_batch(0, 0), led.micro_batch(0, 0))

    def test_bad_values(self):
        with self.assertRaisesRegex(ValueError, "dataset_size: -5 is negative"):
            omni.Ledger(-5, 8, 2, 1, 1)
        with self.assertRaisesRegex(ValueError, "dataset_size: .* is out of range; expected an integer in 1.."):
            omni.Ledger(2**70, 8, 2, 1, 1)
        led = omni.Ledger(96, 8, 2, 1, 1)
        with self.assertRaises(omni.InvalidArgument):
            led.resize(3)  # 8 is not divisible by 2 * 3
        self.assertEqual(led.grad_accum(), 4)  # unchanged
        with self.assertRaises(omni.InvalidArgument):
            led.micro_batch(1, 0)  # rank 1 of a DP size of 1
        with self.assertRaises(omni.InvalidArgument):
            omni.Ledger.load('{"format": 99}')


class D_Checkpoint(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="omni-py-ckpt.")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def write(self, step, tensors, rng=b"\x01\x02", base=None):
        w = omni.CheckpointWriter(self.dir, step, 0, base=base)
        for name, value in tensors.items():
            w.add_tensor(name, value)
        w.add_rank_state(0, rng, np.array([5, 7], np.int64))
        w.finish()
        return omni.commit(self.dir, 1, meta={"step": step, "world_size": 1, "seed": 3, "lr_kind": "cosine"})

    def test_roundtrip_and_other_readers(self):
        w2 = np.arange(6, dtype=np.float32).reshape(2, 3)
        tensors = {"layer.weight": w2, "step": np.array([42], np.int64), "blob": np.frombuffer(b"opaque", np.uint8)}
        if torch is not None:
            tensors["half"] = torch.tensor([1.0, -2.0], dtype=torch.bfloat16)
        path = self.write(42, tensors)
        self.assertEqual(int(os.path.basename(path).split("-")[1]), 42, path)
        r = omni.CheckpointReader(self.dir, latest=True)
        self.assertEqual(r.meta()["step"], 42)
        self.assertEqual(r.meta()["lr_kind"], "cosine")
        names = {n: (dt, shape) for n, dt, shape in r.tensors()}
        self.assertEqual(names["layer.weight"], ("float32", (2, 3)))
        np.testing.assert_array_equal(r.read("layer.weight"), w2)
        np.testing.assert_array_equal(r.read("layer.weight", offset=[1, 1], count=[1, 2]), w2[1:2, 1:3])
        self.assertEqual(bytes(r.read("blob")), b"opaque")
        if torch is not None:
            self.assertEqual(names["half"][0], "bfloat16")
            raw = r.read("half")
            self.assertEqual(torch.from_numpy(raw.view(np.int16)).view(torch.bfloat16).tolist(), [1.0, -2.0])
        rng, consumed = r.rank_state(0)
        self.assertEqual((rng, consumed.tolist()), (b"\x01\x02", [5, 7]))
        with self.assertRaisesRegex(omni.CheckpointError, "no tensor 'nope'"):
            r.read("nope")
        r.close()
        with self.assertRaisesRegex(ValueError, "closed"):
            r.tensors()
        ckpt = os.path.join(BUILD, "ckpt", "omni-ckpt")
        if os.access(ckpt, os.X_OK):
            out = subprocess.run([ckpt, "verify", path], capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        try:
            import h5py
        except ImportError:
            h5py = None
        if h5py is not None:
            shards = [f for f in os.listdir(path) if f.endswith(".h5")]
            self.assertTrue(shards, os.listdir(path))
            with h5py.File(os.path.join(path, shards[0]), "r") as f:
                self.assertTrue(len(list(f.keys())) > 0)

    def test_incremental_and_bad_checkpoints(self):
        base = self.write(1, {"w": np.ones(4, np.float32)})
        w = omni.CheckpointWriter(self.dir, 2, 0, base=base)
        w.add_tensor("w", np.ones(4, np.float32), change="unchanged")
        with self.assertRaisesRegex(ValueError, "change 'maybe'"):
            w.add_tensor("v", np.ones(4, np.float32), change="maybe")
        with self.assertRaisesRegex(TypeError, "float64; expected float32, bfloat16"):
            w.add_tensor("d", np.ones(2))
        w.finish()
        with self.assertRaisesRegex(ValueError, "finished"):
            w.add_tensor("late", np.ones(1, np.float32))
        # Two writers announced, one wrote: the commit fails, the previous checkpoint stays.
        with self.assertRaises(omni.CheckpointError):
            omni.commit(self.dir, 2)
        self.assertEqual(omni.CheckpointReader(self.dir, latest=True).meta()["step"], 1)
        path = omni.commit(self.dir, 1, meta={"step": 2})
        np.testing.assert_array_equal(omni.CheckpointReader(path).read("w"), np.ones(4, np.float32))
        with self.assertRaisesRegex(ValueError, "meta key 'colour'"):
            omni.commit(self.dir, 1, meta={"colour": 1})
        # abandon(): an attempt's files, never a committed checkpoint; a bad attempt name refused.
        w = omni.CheckpointWriter(self.dir, 9, 0, attempt="g4")
        w.add_tensor("x", np.arange(4, dtype=np.float32))
        w.finish()
        self.assertTrue(os.path.isdir(os.path.join(self.dir, ".step-0000000009.partial-g4")))
        omni.abandon(self.dir, 9, attempt="g4")
        self.assertFalse(os.path.exists(os.path.join(self.dir, ".step-0000000009.partial-g4")))
        self.assertTrue(os.path.isdir(path))
        with self.assertRaises(omni.InvalidArgument):
            omni.abandon(self.dir, 9, attempt="../x")
        with self.assertRaises((OverflowError, omni.InvalidArgument, TypeError, ValueError)):
            omni.abandon(self.dir, -1)
        with self.assertRaises(omni.CheckpointError):
            omni.CheckpointReader(os.path.join(self.dir, "missing"))


class E_AfterFinalize(unittest.TestCase):
    def test_closed_runtime(self):
        omni.finalize()
        omni.finalize()  # idempotent
        with self.assertRaises(omni.StateError):
            omni.rank()
        with self.assertRaises(omni.StateError):
            omni.allreduce(np.ones(2, np.float32))
        # The stand-alone parts still work.
        self.assertEqual(omni.Ledger(8, 4, 2, 1, 1).grad_accum(), 2)


if __name__ == "__main__":
    unittest.main(verbosity=2)
