"""One rank for test_ranks.py: trains a stand-in model (its parameters grow by 1 a step, the
same on every rank) under a coordinator, exercising the collectives, the ledger, the
optimizer-state shards and the boundary decisions, and writes one JSON line per event to the
file named by argv[1]. The unit comes from OMNI_UNIT_ID, the job from OMNI_JOB_DIR."""

import json
import os
import signal
import sys
import time

import numpy as np

import omni

out = open(sys.argv[1], "w")
pace = float(sys.argv[2]) if len(sys.argv) > 2 else 0.05


def log(**kw):
    out.write(json.dumps(kw) + "\n")
    out.flush()


P = 10
omni.init()
params = np.zeros(P, np.float32)
omni.register_params(params)
m = omni.state_add(P)
omni.data_configure(480, 11, 24, 2)
step, rewind = omni.start()
begin, shard = omni.get_state_shard(m)
log(event="start", step=step, rewind=rewind, unit=omni.unit()[0], rank=omni.rank(), world=omni.world_size(),
    params=params.tolist(), shard_begin=begin, shard=shard.tolist())
if step == 0:
    omni.set_state_shard(m, np.arange(begin, begin + len(shard), dtype=np.float32))
die_at = int(os.environ.get("OMNI_TEST_DIE_AT", "0"))  # this rank kills itself at that step
while True:
    r, n = omni.rank(), omni.world_size()
    if die_at and step + 1 == die_at:
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get("OMNI_TEST_EXPECT_LOSS"):
        # The others wait in a collective for the rank that dies: the failure reaches every
        # one of them (not only the dead rank's ring neighbours), each at once.
        t0 = time.time()
        try:
            omni.allreduce(np.ones(1 << 16, np.float32))
            omni.allreduce(np.ones(1 << 16, np.float32))
            log(event="no-failure")
        except omni.CommError as e:
            log(event="comm-error", seconds=time.time() - t0, error=str(e))
        d = omni.boundary(step + 1)
        log(event="boundary", step=step + 1, kind=omni.KIND_NAMES[d.kind], world=d.world, rank=d.rank)
        break
    samples = [omni.data_micro_batch(i).tolist() for i in range(omni.data_grad_accum())]
    total = np.array([r + 1.0], np.float32)
    omni.allreduce(total)
    exact = np.array([2**40 + r], np.int64)
    omni.allreduce(exact)
    gathered = np.zeros(n, np.float32)
    omni.allgather(np.array([float(r)], np.float32), gathered)
    bcast = np.array([100.0 if r == 0 else -1.0], np.float32)
    omni.broadcast(bcast, root=0)
    scattered = np.zeros(2, np.float32)
    omni.reduce_scatter(np.ones(2 * n, np.float32), scattered)
    params += 1.0
    step += 1
    begin, shard = omni.get_state_shard(m)
    log(event="step", step=step, rank=r, world=n, samples=samples, total=float(total[0]), exact=int(exact[0]), gathered=gathered.tolist(),
        bcast=float(bcast[0]), scattered=scattered.tolist(), param=float(params[0]), shard_begin=begin,
        shard=shard.tolist())
    time.sleep(pace)
    d = omni.boundary(step)
    log(event="boundary", step=step, kind=omni.KIND_NAMES[d.kind], world=d.world, rank=d.rank)
    if d.kind in (omni.STOP, omni.LEFT):
        break
omni.finalize()
# After the job: refused, not a crash.
try:
    omni.rank()
    log(event="closed", error="none")
except omni.StateError as e:
    log(event="closed", error=str(e))
