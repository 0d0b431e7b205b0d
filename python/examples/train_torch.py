#!/usr/bin/python3
"""train_torch.py: a small multimodal model trained with PyTorch under slurm-omni.

Each sample of slurm-omni's synthetic workload (omni-workload(5); the paper preset by
default: text, images of three datasets, audio much longer than text, the mix moving over
three phases) becomes a sequence: text tokens through an embedding, image patches and audio
frames through encoders of their own, all into one transformer layer (the "LLM"), pooled to
predict a target made from the sample itself. Lengths are the workload's divided by
--length-scale, so it runs on a laptop's CPU.

Under omni-launch every rank runs this script; the omni.torch Job makes the loop elastic:

    sbatch -N2 --ntasks-per-node=2 --omni-elastic=1:4 \\
        --wrap 'omni-launch -- python3 train_torch.py --exact --steps 200 --metrics m.jsonl'

Run alone (no omni-launch) it trains as one rank. --metrics writes one JSON line per step:
step, loss, lr, world, generation, samples (consumed so far) and step_samples (count, sum and
sum of squares of the step's sample indices over every rank); --sample-log DIR writes each
rank's indices ("STEP GENERATION I I ..." per step), as omni-train-demo(1) does.
"""

import argparse
import json
import math
import os
import socket
import sys
import time

import torch

import omni
import omni.torch as ot


def options(argv):
    p = argparse.ArgumentParser(prog="train_torch.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=100, help="optimizer steps in all (default 100)")
    p.add_argument("--global-batch", type=int, default=int(os.environ.get("OMNI_GLOBAL_BATCH", 24)),
                   help="samples per step (default $OMNI_GLOBAL_BATCH, else 24)")
    p.add_argument("--micro-batch", type=int, default=int(os.environ.get("OMNI_MICRO_BATCH", 2)),
                   help="samples per rank per micro-step (default $OMNI_MICRO_BATCH, else 2)")
    p.add_argument("--dataset-size", type=int, default=4800, help="samples per epoch (default 4800)")
    p.add_argument("--seed", type=int, default=1, help="data, order and initialisation seed (default 1)")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (default 3e-3)")
    p.add_argument("--warmup", type=int, default=10, help="steps of linear warmup (default 10)")
    p.add_argument("--ckpt", default=os.environ.get("OMNI_CKPT_DIR"),
                   help="checkpoint root; resumes from its newest checkpoint (default $OMNI_CKPT_DIR)")
    p.add_argument("--ckpt-every", type=int, default=int(os.environ.get("OMNI_CKPT_EVERY", 0)),
                   help="checkpoint every N steps (0: at the end and when stopped)")
    p.add_argument("--pace-ms", type=float, default=0, help="sleep this long in every step, as if computing")
    p.add_argument("--pace-file", help="while this file exists, sleep the milliseconds it holds in every step "
                   "instead of --pace-ms (scripts/demo slows its elastic job while another job runs)")
    p.add_argument("--metrics", help="JSONL file, one line per step (written by DP rank 0)")
    p.add_argument("--sample-log", help="directory: each rank's sample indices per step")
    p.add_argument("--timestamps", action="store_true", help="add the wall-clock time_ms to every metrics line")
    p.add_argument("--save-model", help="at the end, torch.save the model's state_dict to this file (DP rank 0)")
    p.add_argument("--exact", action="store_true", help="bitwise the same loss for every DP size (omni-python(3))")
    p.add_argument("--workload", default="paper", help="a preset (%s) or a file" % ", ".join(omni.Workload.presets()))
    p.add_argument("--length-scale", type=int, default=64, help="divide the workload's lengths by this (default 64)")
    p.add_argument("--balance", help="grouped reordering by the samples' tokens: lpt, kk or grouped")
    o = p.parse_args(argv)
    for name in ("steps", "global_batch", "micro_batch", "dataset_size", "length_scale"):
        if getattr(o, name) < 1:
            p.error("--%s %d: expected a positive integer" % (name.replace("_", "-"), getattr(o, name)))
    if o.ckpt_every < 0:
        p.error("--ckpt-every %d: expected 0 or more" % o.ckpt_every)
    return o


class Model(torch.nn.Module):
    """Encoders per modality into one transformer layer, pooled to one number."""

    def __init__(self, d=16):
        super().__init__()
        self.text = torch.nn.Embedding(64, d)
        self.image = torch.nn.Linear(8, d)
        self.audio = torch.nn.Sequential(torch.nn.Linear(4, d), torch.nn.GELU(), torch.nn.Linear(d, d))
        self.modality = torch.nn.Embedding(3, d)
        self.llm = torch.nn.TransformerEncoderLayer(d, nhead=2, dim_feedforward=32, dropout=0.1, batch_first=True)
        self.head = torch.nn.Linear(d, 1)

    def forward(self, kind, x):
        h = (self.text(x) if kind == 0 else self.image(x) if kind == 1 else self.audio(x)) + self.modality.weight[kind]
        return self.head(self.llm(h.unsqueeze(0)).mean(dim=1)).reshape(1)


class Data:
    """The workload's samples as tensors: a pure function of (seed, index, step)."""

    def __init__(self, o):
        self.w, self.seed, self.scale = omni.Workload(o.workload), o.seed, o.length_scale
        if len(self.w.modalities()) > 3:
            raise SystemExit("train_torch.py: --workload %s has %d modalities; this model encodes 3 (text, image, "
                             "audio)" % (o.workload, len(self.w.modalities())))

    def __call__(self, index, step):
        kind, length = self.w.sample(self.seed, index, step)
        n = min(128, max(1, math.ceil(length / self.scale)))
        pos = torch.arange(n, dtype=torch.float32)
        if kind == 0:
            x = (torch.arange(n) * 7 + index * 13) % 64
        else:
            width = 8 if kind == 1 else 4
            x = torch.sin(pos.unsqueeze(1) * 0.3 + torch.arange(width, dtype=torch.float32) + index * 0.01)
        y = torch.tensor([math.sin(index * 0.7) * 0.5 + 0.1 * kind], dtype=torch.float32)
        return kind, x, y


def training(o):
    """The model, AdamW and its warmup + cosine schedule, initialised from --seed."""
    torch.manual_seed(o.seed)
    model = Model()
    opt = torch.optim.AdamW(model.parameters(), lr=o.lr, weight_decay=0.01)
    warm, total = o.warmup, o.steps
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * min(1.0, (s - warm) / max(1, total - warm)))))
    return model, opt, sched


def setup(argv):
    """The model, optimizer, scheduler, the Job's keyword arguments and the loss of one
    micro-batch (sample indices idx at optimizer step `step`), from the command line; and
    the options. A replay of a run (python/test/float_replay.py) builds the same with it."""
    o = options(argv)
    model, opt, sched = training(o)
    data = Data(o)
    cost = None
    if o.balance:
        cost = lambda i, step: data.w.cost(o.seed, i, step, "tokens")  # noqa: E731
    kwargs = dict(dataset_size=o.dataset_size, global_batch=o.global_batch, micro_batch=o.micro_batch, seed=o.seed,
                  ckpt=o.ckpt, ckpt_every=o.ckpt_every, exact=o.exact, balance=o.balance, cost=cost)

    def micro_loss(idx, step):
        loss = 0
        for i in idx:
            kind, x, y = data(i, step - 1)
            loss = loss + torch.nn.functional.mse_loss(model(kind, x), y)
        return loss / len(idx)

    return model, opt, sched, kwargs, micro_loss, o


def main(argv):
    model, opt, sched, kwargs, micro_loss, o = setup(argv)
    job = ot.Job(model, opt, sched, **kwargs)
    metrics = None  # opened by whichever rank is DP rank 0 when a step ends
    samples_log = None
    if o.sample_log:
        samples_log = open(os.path.join(o.sample_log, "%s-%d.samples" % (socket.gethostname(), os.getpid())), "a")
    for step in job.steps(o.steps):
        mine = []
        for idx in job.micro_batches():
            job.backward(micro_loss(idx, step))
            mine.extend(idx)
        lr, world, generation, first = sched.get_last_lr()[0], job.world, omni.generation(), job.rank == 0
        sums = torch.tensor([len(mine), sum(mine), sum(i * i for i in mine)], dtype=torch.int64)
        job.all_reduce(sums)
        if samples_log:
            samples_log.write("%d %d %s\n" % (step, generation, " ".join(map(str, mine))))
            samples_log.flush()
        pace_ms = o.pace_ms
        if o.pace_file:
            try:
                with open(o.pace_file) as f:
                    pace_ms = min(float(f.read().strip() or 0), 60000.0)
            except (OSError, ValueError):
                pass  # no file (or one being written): --pace-ms
        if pace_ms > 0:
            time.sleep(pace_ms / 1000.0)
        job.step()
        if o.metrics and first and not job.dropped:
            metrics = metrics or open(o.metrics, "a")
            line = {"step": step, "loss": job.last_loss, "lr": lr, "world": world, "generation": generation,
                    "samples": step * o.global_batch, "step_samples": sums.tolist()}
            if o.timestamps:
                line["time_ms"] = int(time.time() * 1000)
            metrics.write(json.dumps(line) + "\n")
            metrics.flush()
    if o.save_model and job.last_rank == 0:
        torch.save(model.state_dict(), o.save_model)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except omni.Error as e:
        print("train_torch.py: %s" % e, file=sys.stderr)
        sys.exit(1)
