#!/usr/bin/python3
"""The example's training (python/examples/train_torch.py: the same model, data, optimizer,
schedule and batch) written as PyTorch users write it for torchrun's elastic mode: DDP on
the group torchrun sets up, a checkpoint (torch.save) every --ckpt-every steps, and a resume
from it whenever torchrun restarts the workers. For torchrun-vs-omni. Rank 0 writes a
metrics line per step with the wall-clock time.
Usage: torchrun ... torchrun_train.py --steps N --ckpt FILE --ckpt-every K --metrics FILE"""

import argparse
import contextlib
import json
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from train_torch import Data, training  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--global-batch", type=int, default=24)
    ap.add_argument("--dataset-size", type=int, default=4800)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--pace-ms", type=float, default=0)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--ckpt-every", type=int, default=10)
    ap.add_argument("--metrics", required=True)
    ap.add_argument("--workload", default="paper")
    ap.add_argument("--length-scale", type=int, default=64)
    o = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model, opt, sched = training(o)
    step = 0
    if os.path.exists(o.ckpt):
        state = torch.load(o.ckpt)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        step = state["step"]
    ddp = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
    data = Data(o)
    metrics = open(o.metrics, "a") if rank == 0 else None
    if metrics:
        metrics.write(json.dumps({"event": "start", "step": step, "world": world, "time_ms": int(time.time() * 1000)}) + "\n")
        metrics.flush()
    g = torch.Generator().manual_seed(o.seed)
    while step < o.steps:
        epoch, pos = divmod(step * o.global_batch, o.dataset_size)
        order = torch.randperm(o.dataset_size, generator=g.manual_seed(o.seed + epoch)).tolist()
        batch = order[pos:pos + o.global_batch]
        mine = batch[rank::world]
        # One sample at a time (their lengths differ), DDP reducing at the last one only.
        for n, i in enumerate(mine):
            kind, x, y = data(i, step)
            with (ddp.no_sync() if n < len(mine) - 1 else contextlib.nullcontext()):
                (torch.nn.functional.mse_loss(ddp(kind, x), y) / len(mine)).backward()
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        if o.pace_ms:
            time.sleep(o.pace_ms / 1000.0)
        if rank == 0 and step % o.ckpt_every == 0:
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                        "step": step}, o.ckpt + ".tmp")
            os.replace(o.ckpt + ".tmp", o.ckpt)
        if metrics:
            metrics.write(json.dumps({"step": step, "world": world, "time_ms": int(time.time() * 1000)}) + "\n")
            metrics.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
