"""One rank of a small PyTorch training under omni.torch, for test_torch.py: an MLP with
dropout on synthetic data made from the sample index (the same on every machine), AdamW
with a warmup schedule. Writes a JSON line per optimizer step to argv[1]: the step, the loss
(as float.hex, for bitwise comparison), the world, and a hash of the parameters; and one
line at the start (how it began, and the parameters' hash then).
Usage: torch_worker.py OUT STEPS MODE [CKPT_DIR [CKPT_EVERY [PACE_S]]]; MODE 1: exact, 0: float,
ddp: float through DistributedDataParallel (job.module)."""

import hashlib
import json
import math
import os
import sys
import time

import torch

import omni.torch as ot


def sample(i):
    x = torch.tensor([math.sin(i * 0.37 + k) for k in range(8)], dtype=torch.float32)
    return x, x[:4].sum().reshape(1) * 0.5 - x[4:].prod().reshape(1)


def phash(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().numpy().tobytes())
    return h.hexdigest()[:16]


def setup(argv):
    """setup([MODE]): the model, optimizer, scheduler, Job keyword arguments and micro-batch
    loss (float_replay.py replays runs of this worker with them)."""
    mode = argv[0] if argv else "1"
    torch.set_num_threads(1)  # float mode too: the same bits on every rank (float_replay.py)
    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Dropout(0.1),
                                torch.nn.Linear(32, 1))
    # OMNI_TEST_SGD=1: plain SGD, whose update is linear in the gradient (a gradient of the wrong
    # scale shows in the loss, where AdamW would normalise it away).
    opt = (torch.optim.SGD(model.parameters(), lr=0.05) if os.environ.get("OMNI_TEST_SGD")
           else torch.optim.AdamW(model.parameters(), lr=0.01))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 5))
    kwargs = dict(dataset_size=96, global_batch=12, micro_batch=2, seed=3, exact=mode == "1", ddp=mode == "ddp")
    holder = {"module": model}

    def micro_loss(idx, step):
        xs, ys = zip(*(sample(i) for i in idx))
        return torch.nn.functional.mse_loss(holder["module"](torch.stack(xs)), torch.stack(ys))

    return model, opt, sched, kwargs, micro_loss, holder


def hold_group_builds(seconds):
    """OMNI_TEST_STORE_SET_HOLD_S (test_torch.py's strangers): every set into the job's store
    returns only after `seconds`, so a Gloo group being built keeps its pair listeners open
    that long (Gloo sets a rank's pair addresses, then waits for its peers') and a stranger
    cannot miss them."""
    plain = ot.Store.set

    def held(self, key, value):
        plain(self, key, value)
        time.sleep(seconds)

    ot.Store.set = held


def main(argv):
    if os.environ.get("OMNI_TEST_STORE_SET_HOLD_S"):
        hold_group_builds(float(os.environ["OMNI_TEST_STORE_SET_HOLD_S"]))
    # A joiner started early (coord_job.run_job's prestart) has imported torch by now and
    # waits here, before it contacts the coordinator, until the job has formed without it.
    start_file = os.environ.get("OMNI_TEST_START_FILE")
    if start_file:
        deadline = time.monotonic() + 120
        while not os.path.exists(start_file):
            if time.monotonic() > deadline:
                sys.exit("torch_worker: %s did not appear in 120 s" % start_file)
            time.sleep(0.02)
    out = open(argv[0], "w")
    steps = int(argv[1])
    ckpt = argv[3] if len(argv) > 3 and argv[3] != "-" else None
    ckpt_every = int(argv[4]) if len(argv) > 4 else 0
    pace = float(argv[5]) if len(argv) > 5 else 0.0
    model, opt, sched, kwargs, micro_loss, holder = setup([argv[2]])
    job = ot.Job(model, opt, sched, ckpt=ckpt, ckpt_every=ckpt_every, **kwargs)
    holder["module"] = job.module  # DDP's wrapper in ddp mode
    out.write(json.dumps({"event": "start", "step": job.step_count, "world": job.world, "params": phash(model),
                          "how": job.events[0][1]}) + "\n")
    out.flush()
    for step in job.steps(steps):
        samples = []
        holder["module"] = job.module
        for idx in job.micro_batches():
            job.backward(micro_loss(idx, step))
            samples.extend(idx)
        world, lr = job.world, sched.get_last_lr()[0]
        kind = job.step()
        out.write(json.dumps({"event": "step", "step": step, "loss": job.last_loss.hex(), "lr": lr, "world": world,
                              "params": phash(model), "samples": samples, "kind": kind}) + "\n")
        out.flush()
        time.sleep(pace)


if __name__ == "__main__":
    main(sys.argv[1:])
