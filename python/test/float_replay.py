#!/usr/bin/python3
"""float_replay.py: omni.torch's float mode against the static run, step by step, within a
bound derived from floating-point summation (omni-python(3), FLOAT MODE).

Usage: float_replay.py --trainer FILE --ckpt ROOT --metrics FILE [--steps N] -- TRAINER-ARGS

An elastic float run checkpointed after every step (ROOT/step-K) and its per-step losses
(FILE: JSON lines with "step" and "loss", a float or float.hex) are replayed here one step
at a time as the static computation: one process, world 1, starting every step K from the
elastic run's own state of step K-1 (its checkpoint), with the trainer's model, optimizer,
scheduler, job options and micro-batch loss (FILE's setup(argv) returns them, see below).

Why it is bounded: the ledger gives a step the same micro-batches, each with the same RNG
seed, whatever the DP size, and omni.torch scales each micro-batch's loss by its share of the
global batch; so from the same state every micro-batch's gradient g_i is bitwise the same on
any rank at one intra-op thread count (fixed to 1 here and, through OMP_NUM_THREADS=1, in the
run checked). Only the order of summing the M micro-batch gradients (autograd's accumulation
on each rank, then the ring allreduce) differs, and any order of summing M floats is within
gamma(M-1) * sum|g_i| of the exact sum (Higham, Accuracy and Stability of Numerical
Algorithms, 2nd ed., eq. 4.4; gamma(n) = n*u / (1 - n*u), u = 2^-24 for float32). Two orders
differ by at most twice that:
    |g_elastic - g_static| <= dg = 2 gamma(M-1) S,   S = sum_i |g_i|       (elementwise)
    |loss_elastic - loss_static| <= 2 gamma(M) sum_i |l_i|   (l_i: a micro-batch's scaled loss)
AdamW (torch's single-tensor form) then updates m, v and the parameters with the same
operations on both sides. m takes at most 3 float32 operations (torch 1.13: mul, add; 2.x:
lerp), v at most 4, each rounding by at most u of a magnitude no larger than the previous
moment's plus the new term's (m0, v0: the moments before the step):
    |dm| <= (1-b1) dg + 2 * 3u (|m0| + (1-b1) S)
    |dv| <= (1-b2) (2S + dg) dg + 2 * 4u (|v0| + (1-b2) S^2)
and the parameters' step lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps) lies within the interval that
m +- dm and v +- dv give it, plus 6u of its size on each side for its own roundings (sqrt,
div, add, div, mul) and u of the parameter for the final add. Every bound gets a factor
1 + 1e-4 for the second-order terms (products of u's) left out above.
Free-running, two float runs drift apart as any two summation orders do; the check starts
each step from the elastic run's state so that the drift of earlier steps does not hide
what one step does. It also checks its own power: at every step, leaving out one
micro-batch's gradient moves m by more than 10x its bound somewhere.

The trainer FILE defines setup(argv) -> (model, optimizer, scheduler, job_kwargs,
micro_loss), where micro_loss(idx, step) is the loss of the micro-batch of sample indices
idx at optimizer step `step` (1-based), a mean over its samples, as the trainer's loop
computes it. The optimizer must be torch.optim.AdamW.

Exit status: 0 every step within its bounds, 1 a step outside (named, with the element and
both values), 2 bad usage.
"""

import argparse
import importlib.util
import json
import os
import sys

import torch

import omni
import omni.torch as ot

U = 2.0 ** -24
SLACK = 1.0 + 1e-4


def gamma(n):
    return n * U / (1 - n * U)


def load_trainer(path, argv):
    spec = importlib.util.spec_from_file_location("omni_trainer", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.setup(argv)[:5]  # a trainer may return more, for its own use


def losses(path):
    out = {}
    for line in open(path):
        e = json.loads(line)
        if e.get("event", "step") != "step":
            continue
        v = e["loss"]
        out[e["step"]] = float.fromhex(v) if isinstance(v, str) else float(v)
    return out


class Violation(Exception):
    pass


def within(step, what, got, ref, bound):
    """Elementwise |got - ref| <= bound (float64 tensors); returns the largest ratio."""
    diff = (got - ref).abs()
    ratio = diff / bound.clamp_min(1e-300)
    worst = int(torch.argmax(ratio))
    r = float(ratio.reshape(-1)[worst])
    if r > 1.0:
        raise Violation("step %d: %s element %d: elastic %.9g, static %.9g, difference %.3g > bound %.3g" %
                        (step, what, worst, float(got.reshape(-1)[worst]), float(ref.reshape(-1)[worst]),
                         float(diff.reshape(-1)[worst]), float(bound.reshape(-1)[worst])))
    return r


def main(argv):
    if "--" in argv:
        cut = argv.index("--")
        mine, theirs = argv[:cut], argv[cut + 1:]
    else:
        mine, theirs = argv, []
    p = argparse.ArgumentParser(prog="float_replay.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--trainer", required=True, help="a Python file defining setup(argv)")
    p.add_argument("--ckpt", required=True, help="the elastic run's checkpoint root (one per step)")
    p.add_argument("--metrics", required=True, help="the elastic run's per-step losses (JSON lines)")
    p.add_argument("--steps", type=int, help="steps to check (default: every step in --metrics)")
    o = p.parse_args(mine)
    elastic_loss = losses(o.metrics)
    last = o.steps or max(elastic_loss)
    torch.set_num_threads(1)
    for k in ("OMNI_JOB_DIR", "OMNI_UNIT_ID", "SLURM_JOB_ID"):
        os.environ.pop(k, None)  # the static run is one process without a job
    model, opt, sched, kwargs, micro_loss = load_trainer(o.trainer, theirs)
    if not isinstance(opt, torch.optim.AdamW):
        p.error("--trainer %s: its optimizer is %s; the bound is derived for torch.optim.AdamW" %
                (o.trainer, type(opt).__name__))
    kwargs = dict(kwargs, ckpt=None, ckpt_every=0, exact=False, ddp=False)
    job = ot.Job(model, opt, sched, **kwargs)
    params = [q for q in model.parameters() if q.requires_grad]
    ratios = {"loss": 0.0, "exp_avg": 0.0, "exp_avg_sq": 0.0, "param": 0.0}
    power = float("inf")
    for step in job.steps(last):
        if step > 1:  # the elastic run's state after step-1 (step 1 starts from the seed's model)
            r = omni.CheckpointReader(os.path.join(o.ckpt, "step-%010d" % (step - 1)))
            state, _ = ot.read_checkpoint(r, model, opt, sched)
            job._apply(state)
        group = opt.param_groups[0]
        lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        S = [torch.zeros(q.shape, dtype=torch.float64) for q in params]
        g_last = None
        loss_abs, micro = 0.0, 0
        for idx in job.micro_batches():
            loss = micro_loss(idx, step)
            scale = len(idx) / job.global_batch
            g = torch.autograd.grad(loss * scale, params, retain_graph=True, allow_unused=True)
            g_last = [torch.zeros(q.shape, dtype=torch.float64) if x is None else x.double() for q, x in zip(params, g)]
            for s, x in zip(S, g_last):
                s += x.abs()
            loss_abs += abs(float(loss.detach()) * scale)
            micro += 1
            job.backward(loss)
        pre = [q.detach().double() * (1 - lr * wd) for q in params]
        zero = [torch.zeros(q.shape, dtype=torch.float64) for q in params]
        m0 = [opt.state[q]["exp_avg"].double() if "exp_avg" in opt.state[q] else z for q, z in zip(params, zero)]
        v0 = [opt.state[q]["exp_avg_sq"].double() if "exp_avg_sq" in opt.state[q] else z for q, z in zip(params, zero)]
        job.step()
        n = opt.state[params[0]]["step"]
        n = int(n.item()) if torch.is_tensor(n) else int(n)
        bc1, bc2 = 1 - b1 ** n, 1 - b2 ** n
        size = lr / bc1
        dg = [2 * gamma(micro - 1) * s for s in S]
        r = omni.CheckpointReader(os.path.join(o.ckpt, "step-%010d" % step))
        state, _ = ot.read_checkpoint(r, model, opt, sched)  # reads only; the model keeps the static state
        if step in elastic_loss:
            b = torch.tensor([SLACK * 2 * gamma(micro) * loss_abs], dtype=torch.float64)
            ratios["loss"] = max(ratios["loss"], within(step, "loss", torch.tensor([elastic_loss[step]], dtype=torch.float64),
                                                        torch.tensor([job.last_loss], dtype=torch.float64), b))
        names = {id(q): k for k, q in model.named_parameters()}
        order = [id(q) for g in opt.param_groups for q in g["params"]]  # the optimizer state's indices
        e_state = state["optimizer"]["state"]
        step_power = 0.0
        for i, q in enumerate(params):
            name = names[id(q)]
            m_s, v_s = opt.state[q]["exp_avg"].double(), opt.state[q]["exp_avg_sq"].double()
            e = e_state[order.index(id(q))]
            m_e, v_e = e["exp_avg"].double(), e["exp_avg_sq"].double()
            dm = SLACK * ((1 - b1) * dg[i] + 2 * 3 * U * (m0[i].abs() + (1 - b1) * S[i]))
            dv = SLACK * ((1 - b2) * (2 * S[i] + dg[i]) * dg[i] + 2 * 4 * U * (v0[i].abs() + (1 - b2) * S[i] ** 2))
            ratios["exp_avg"] = max(ratios["exp_avg"], within(step, name + " exp_avg", m_e, m_s, dm))
            ratios["exp_avg_sq"] = max(ratios["exp_avg_sq"], within(step, name + " exp_avg_sq", v_e, v_s, dv))
            # The step's size over the box m +- dm, v +- dv (denominator positive, monotone in v).
            rb2 = bc2 ** 0.5
            d_lo = (v_s - dv).clamp_min(0).sqrt() / rb2 + eps
            d_hi = (v_s + dv).sqrt() / rb2 + eps
            q_s = m_s / (v_s.sqrt() / rb2 + eps)
            corners = torch.stack([(m_s - dm) / d_lo, (m_s - dm) / d_hi, (m_s + dm) / d_lo, (m_s + dm) / d_hi])
            dq = torch.maximum((corners.max(0).values - q_s).abs(), (corners.min(0).values - q_s).abs())
            p_s = q.detach().double()
            dp = SLACK * (size * dq + 2 * 6 * U * size * (q_s.abs() + dq) + 2 * U * (pre[i].abs() + size * q_s.abs()))
            ratios["param"] = max(ratios["param"], within(step, name, state["model"][name].double(), p_s, dp))
            # Power: one micro-batch's gradient left out moves m by (1-b1) g_last.
            step_power = max(step_power, float(((1 - b1) * g_last[i].abs() / dm.clamp_min(1e-300)).max()))
        power = min(power, step_power)
    print("float_replay: %d steps within the derived bounds; largest difference/bound: loss %.3g, exp_avg %.3g, "
          "exp_avg_sq %.3g, parameters %.3g; one micro-batch left out would exceed the bound %.3gx" %
          (last, ratios["loss"], ratios["exp_avg"], ratios["exp_avg_sq"], ratios["param"], power))
    if power < 10:
        print("float_replay: the bound is too loose to see a micro-batch left out (%.3gx < 10x)" % power,
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Violation as e:
        print("float_replay: %s" % e, file=sys.stderr)
        sys.exit(1)
