#!/usr/bin/python3
"""Independent reader: h5py (Debian's python3-h5py) reads logical tensors through index.h5.

A checkpoint is written by make_test_ckpt with 3 writers (uneven slices), then an incremental
one whose frozen tensor lives in the first checkpoint's shard files. h5py opens only index.h5
(from another working directory) and must see exactly the values computed here with numpy,
independently of libomni-ckpt. Run by 'make check' with /usr/bin/python3.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import h5py
    import numpy as np
except ImportError as e:   # automake's SKIP, saying what is missing rather than failing
    print(f"SKIP: {sys.executable} cannot import h5py/numpy ({e}); install python3-h5py "
          "python3-numpy (scripts/install-deps)", file=sys.stderr)
    sys.exit(77)


def expected_fp32(shape, seed):
    # test_util.h: element i is (i % 4096) * 0.25 + seed % 1000, as float32.
    i = np.arange(int(np.prod(shape)), dtype=np.int64)
    return ((i % 4096).astype(np.float32) * np.float32(0.25) +
            np.float32(seed % 1000)).reshape(shape)


def expected_bf16_as_fp32(shape, seed):
    # bf16 by truncating the fp32 bit pattern to its upper 16 bits.
    bits = expected_fp32(shape, seed).view(np.uint32) & np.uint32(0xFFFF0000)
    return bits.view(np.float32)


def main():
    maker = os.environ.get("MAKE_TEST_CKPT")
    if not maker:
        print("MAKE_TEST_CKPT is not set (run through 'make check')", file=sys.stderr)
        return 99
    tmp = tempfile.mkdtemp(prefix="omni-ckpt-h5py.")
    try:
        root = os.path.join(tmp, "root")
        first = subprocess.run([maker, root, "100", "3"], check=True, capture_output=True,
                               text=True).stdout.strip()
        second = subprocess.run([maker, root, "200", "3", "--base", first], check=True,
                                capture_output=True, text=True).stdout.strip()
        os.chdir("/")   # virtual dataset sources must resolve relative to index.h5, not cwd
        failures = 0

        with h5py.File(os.path.join(first, "index.h5"), "r") as f:
            assert f.attrs["omni_ckpt_format_version"] == 1, dict(f.attrs)
            manifest = json.loads(f["manifest"][()].decode())
            assert manifest["step"] == 100 and manifest["writers"] == 3, manifest
            embed = f["tensors/model/embed"]
            assert embed.is_virtual, "model/embed is not a virtual dataset"
            got = embed[()]
            want = expected_fp32((37, 5), 100)
            if got.dtype != np.float32 or not np.array_equal(got, want):
                print(f"model/embed differs: got {got.dtype} {got.ravel()[:6]}, "
                      f"want {want.ravel()[:6]}", file=sys.stderr)
                failures += 1
            w = f["tensors/model/layers.0/w"].astype("float32")[()]
            if not np.array_equal(w, expected_bf16_as_fp32((10, 3), 100)):
                print("model/layers.0/w (bf16) differs", file=sys.stderr)
                failures += 1
            # A hyperslab that crosses two writers' slices.
            part = embed[11:15, 1:4]
            if not np.array_equal(part, want[11:15, 1:4]):
                print("hyperslab [11:15, 1:4] differs", file=sys.stderr)
                failures += 1

        with h5py.File(os.path.join(second, "index.h5"), "r") as f:
            # Reused from step 100 through a '../step-0000000100/shard-N.h5' source.
            frozen = f["tensors/model/frozen"][()]
            if not np.array_equal(frozen, expected_fp32((64, 256), 7)):
                print("model/frozen (incremental reference) differs", file=sys.stderr)
                failures += 1
            # test_util.h: int64 element i is i * 1000003 + seed - 500.
            step = f["tensors/optim/step"][()]
            if step.dtype != np.int64 or step.tolist() != [200 - 500]:
                print(f"optim/step differs: {step!r}", file=sys.stderr)
                failures += 1
            embed = f["tensors/model/embed"][()]
            if not np.array_equal(embed, expected_fp32((37, 5), 200)):
                print("model/embed at step 200 differs", file=sys.stderr)
                failures += 1
        if failures:
            return 1
        print("h5py read model/embed, model/layers.0/w and the incremental model/frozen "
              "through index.h5: all equal")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
