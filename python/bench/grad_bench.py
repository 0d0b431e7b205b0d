#!/usr/bin/python3
"""Gradient averaging through omni.torch against torch.distributed's Gloo, side by side, on
the same tensors, ranks and host; and a boundary without change against a 100 ms step.

Starts a coordinator (runtime_coord_serve) and RANKS processes of this script on this
machine. Each rank builds an omni.torch Job around a model of Linear layers holding MIB MiB
of float32 parameters, then, REPS times each, interleaved:
  omni     Job's gradient sum: the gradients flattened, omni.allreduce (libomni's Gloo) in
           25 MiB buckets in parameter order, copied back;
  gloo     the same flattening and buckets through torch.distributed.all_reduce on the
           generation's Gloo group (the best honest version of the other side: same
           parallelism, same buckets);
  ddp      DistributedDataParallel's reduction: a backward with DDP minus the same backward
           without it (DDP overlaps its buckets with the backward; what is left is its cost);
and times omni.boundary() with nothing changing. Prints medians, the ratios omni/gloo and
omni/ddp in throughput (goal >= 0.9), and the boundary as a share of a 100 ms step (goal
<= 1%). Usage: grad_bench.py [--ranks N] [--mib M] [--reps R] [--serve PATH]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def worker(o):
    import torch
    import torch.distributed as dist
    import omni
    import omni.torch as ot

    torch.set_num_threads(1)
    width = 1024
    layers = max(1, int(o.mib * (1 << 20) / 4 / (width * width)))
    torch.manual_seed(1)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)])
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    job = ot.Job(model, opt, dataset_size=64, global_batch=8, micro_batch=1, seed=1)
    x = torch.randn(4, width)
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=job.process_group)
    times = {"omni": [], "gloo": [], "ddp": [], "plain": []}

    def backward(m):
        t0 = time.perf_counter()
        m(x).square().mean().backward()
        return time.perf_counter() - t0

    for _ in range(o.reps):
        for p in model.parameters():
            p.grad = torch.ones_like(p)
        dist.barrier()
        t0 = time.perf_counter()
        job._loss_acc = 0.0
        job._average_gradients()
        times["omni"].append(time.perf_counter() - t0)
        grads = [p.grad.reshape(-1) for p in model.parameters()]
        dist.barrier()
        t0 = time.perf_counter()
        flat = torch.cat(grads)
        for lo in range(0, flat.numel(), job._bucket_elems):
            dist.all_reduce(flat[lo:lo + job._bucket_elems], group=job.process_group)
        off = 0
        for p in model.parameters():
            p.grad.copy_(flat[off:off + p.numel()].view_as(p))
            off += p.numel()
        times["gloo"].append(time.perf_counter() - t0)
        model.zero_grad(set_to_none=True)
        dist.barrier()
        times["plain"].append(backward(model))
        model.zero_grad(set_to_none=True)
        dist.barrier()
        times["ddp"].append(backward(ddp))
        model.zero_grad(set_to_none=True)
    del ddp
    boundary = []
    step = job.step_count
    for _ in range(o.reps * 5):
        step += 1
        t0 = time.perf_counter()
        d = omni.boundary(step)
        boundary.append(time.perf_counter() - t0)
        if d.kind != omni.CONTINUE:
            break
    job.step_count = step
    out = {k: statistics.median(v) for k, v in times.items()}
    out["boundary"] = statistics.median(boundary)
    out["rank"], out["bytes"] = job.rank, sum(p.numel() for p in model.parameters()) * 4
    with open(o.out, "w") as f:
        json.dump(out, f)
    job._finish()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--mib", type=float, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--serve", default=os.environ.get("OMNI_COORD_SERVE"))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    o = ap.parse_args()
    if o.worker:
        return worker(o)
    if not o.serve or not os.access(o.serve, os.X_OK):
        ap.error("--serve: runtime_coord_serve is not built (make -C launcher check), or give its path")
    d = tempfile.mkdtemp(prefix="omni-grad-bench.")
    job = os.path.join(d, "job")
    os.mkdir(job, 0o700)
    # A reshape to the same size never applies, so the coordinator never stops the job.
    serve = subprocess.Popen([o.serve, job, str(o.ranks), str(o.ranks), "3600"], stdout=subprocess.PIPE, text=True)
    serve.stdout.readline()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMNI_", "PMIX_", "SLURM_"))}
    procs = []
    for u in range(o.ranks):
        e = dict(env, OMNI_JOB_DIR=job, OMNI_UNIT_ID=str(u), OMNI_UNIT_SLOT="0", OMNI_UNIT_SIZE="1",
                 OMNI_GLOO_HOST="127.0.0.1", OMNI_LOG_LEVEL="warning")
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", "--mib", str(o.mib), "--reps",
                                       str(o.reps), "--out", os.path.join(d, "r%d.json" % u)], env=e))
    rc = max(p.wait() for p in procs)
    serve.kill()
    serve.wait()
    if rc:
        print("grad_bench: a rank failed (exit %d)" % rc, file=sys.stderr)
        return 1
    rs = [json.load(open(os.path.join(d, "r%d.json" % u))) for u in range(o.ranks)]
    med = {k: statistics.median(r[k] for r in rs) for k in ("omni", "gloo", "ddp", "plain", "boundary")}
    ddp_cost = max(med["ddp"] - med["plain"], 1e-9)
    mib = rs[0]["bytes"] / (1 << 20)
    print("grad_bench: %d ranks on this machine, %.0f MiB of float32 gradients, %d reps (medians)" % (o.ranks, mib, o.reps))
    print("  omni.torch (libomni Gloo, 25 MiB buckets)   %8.1f ms  %7.1f MiB/s" % (med["omni"] * 1e3, mib / med["omni"]))
    print("  torch.distributed Gloo, same buckets        %8.1f ms  %7.1f MiB/s" % (med["gloo"] * 1e3, mib / med["gloo"]))
    print("  DDP reduction (backward with - without)     %8.1f ms  %7.1f MiB/s" % (ddp_cost * 1e3, mib / ddp_cost))
    print("  omni / gloo throughput: %.2fx   omni / ddp: %.2fx   (goal >= 0.9x)" %
          (med["gloo"] / med["omni"], ddp_cost / med["omni"]))
    print("  boundary without change: %.2f ms = %.2f%% of a 100 ms step (goal <= 1%%)" %
          (med["boundary"] * 1e3, med["boundary"] * 1e3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
