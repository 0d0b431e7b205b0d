"""omni.torch: a PyTorch training loop on slurm-omni, elastic in its data-parallel size.

A plain loop changes by a few lines (omni-python(3), PYTORCH):

    import omni.torch as ot
    job = ot.Job(model, optimizer, scheduler, dataset_size=len(data),
                 global_batch=64, micro_batch=8, seed=1, ckpt="ckpt", ckpt_every=20)
    for step in job.steps(1000):
        for idx in job.micro_batches():             # this rank's samples, from the ledger
            x, y = collate(data, idx)
            job.backward(loss_fn(model(x), y))       # a mean over the micro-batch
        job.step()                                   # average, optimizer, scheduler, boundary

The job owns the model, optimizer and scheduler: it resumes from the newest checkpoint,
averages the gradients over the data-parallel group (bucketed, in parameter order, divided
by the global batch), steps the optimizer and scheduler, and meets the job's other ranks at
the step boundary. There it reshapes: ranks that join receive the parameters, optimizer
and scheduler state and the step from the survivors (never from disk); after a loss the
survivors rewind to the last checkpoint. Every generation gets a torch.distributed process
group (Gloo on CPU, NCCL on GPU) whose rendezvous goes through the job's coordinator, so
torch.distributed collectives work in every generation (job.process_group, or the default
group).

exact=True makes the loss bitwise the same for every DP size and resize history: each
micro-batch's gradient is turned into 64-bit fixed point (multiples of 2**-40) and summed
as integers, and the intra-op thread count is fixed (torch.set_num_threads). Its cost: an
int64 accumulator per parameter (2x the float32 parameters' memory) and a conversion per
micro-batch.
"""

import contextlib
import datetime
import fcntl
import functools
import gc
import json
import os
import signal
import socket
import struct
import sys
import warnings

import numpy as np
import torch
import torch.distributed as dist

import omni

#: Fixed-point scale of exact mode: gradients are rounded to multiples of 2**-FIXED_BITS.
FIXED_BITS = 40
#: Largest gradient element exact mode takes (the int64 sum of every micro-batch stays far
#: below 2**63 for up to 2**20 micro-batches a step).
FIXED_LIMIT = 2.0 ** 2


class Store(dist.Store):
    """A torch.distributed store in the job's coordinator, for one generation, behind the job
    secret (omni_store_* in libomni(3)). Keys are hex-encoded: torch's keys may hold any
    character, the coordinator's only [A-Za-z0-9._:/@-]."""

    def __init__(self, generation, timeout=datetime.timedelta(seconds=300)):
        super().__init__()
        self._generation = int(generation)
        self._timeout_ms = int(timeout.total_seconds() * 1000)

    @staticmethod
    def _key(key):
        return (key.encode() if isinstance(key, str) else bytes(key)).hex()

    def set(self, key, value):
        omni.store_set(self._generation, self._key(key), value.encode() if isinstance(value, str) else bytes(value))

    def get(self, key):
        return omni.store_get(self._generation, self._key(key), self._timeout_ms)

    def add(self, key, amount):
        return omni.store_add(self._generation, self._key(key), int(amount))

    def wait(self, keys, timeout=None):
        ms = self._timeout_ms if timeout is None else int(timeout.total_seconds() * 1000)
        omni.store_wait(self._generation, [self._key(k) for k in keys], ms)

    def check(self, keys):
        for k in keys:
            try:
                omni.store_get(self._generation, self._key(k), 0)
            except omni.CommError:
                return False
        return True

    def set_timeout(self, timeout):
        self._timeout_ms = int(timeout.total_seconds() * 1000)


def _is_comm_failure(e):
    """Whether a RuntimeError from torch.distributed is a peer's failure (a closed or reset
    connection, a timeout) rather than a mistake of the loop's."""
    text = str(e).lower()
    return any(w in text for w in ("connection", "gloo", "nccl", "timed out", "timeout", "peer"))


def _local_address():
    """The IPv4 address this rank's traffic to the coordinator leaves from, as libomni's own
    Gloo transport uses it (OMNI_GLOO_HOST, else the route to the coordinator), or None."""
    if os.environ.get("OMNI_GLOO_HOST"):
        return os.environ["OMNI_GLOO_HOST"]
    endpoint = os.environ.get("OMNI_COORD_ADDR")
    if not endpoint and os.environ.get("OMNI_JOB_DIR"):
        try:
            with open(os.path.join(os.environ["OMNI_JOB_DIR"], "coordinator")) as f:
                endpoint = f.read().strip()
        except OSError:
            return None
    if not endpoint or not endpoint.startswith("tcp://"):
        return None
    host, _, port = endpoint[len("tcp://"):].rpartition(":")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, int(port)))
            return s.getsockname()[0]
    except (OSError, ValueError):
        return None


def _interface_of(address):
    """The network interface holding `address` (Linux), or None."""
    for _, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                raw = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
            except OSError:
                continue
            if socket.inet_ntoa(raw[20:24]) == address:
                return name
    return None


def _bind_collectives():
    """torch's Gloo and NCCL pick an interface by the hostname, which need not resolve on a
    cluster (and falls back to loopback, which no other host reaches): point them at the
    interface libomni uses, unless the user chose one (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME)."""
    if os.environ.get("GLOO_SOCKET_IFNAME") and os.environ.get("NCCL_SOCKET_IFNAME"):
        return
    address = _local_address()
    name = _interface_of(address) if address else None
    if name:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", name)
        os.environ.setdefault("NCCL_SOCKET_IFNAME", name)


_gloo_guard_state = {}


def _gloo_guard_unavailable(why):
    """Said once a process: the generation's Gloo group is built with torch's plain devices."""
    if not _gloo_guard_state.get("warned"):
        _gloo_guard_state["warned"] = True
        warnings.warn("omni.torch: torch.distributed's Gloo group is built UNGUARDED (%s): while it "
                      "is being built, whoever reaches this host can connect to its pair listeners "
                      "(take a pair, or crash the rank with garbage); libomni's own collectives stay "
                      "guarded" % why, RuntimeWarning, stacklevel=3)


def _guarded_devices():
    """Gloo TCP devices whose pairs take a connection only after the pair's token (libomni's
    guard, gloo_guard.h), where torch's own would listen: one per GLOO_SOCKET_IFNAME interface,
    else on the address libomni uses. TypeError where torch's ProcessGroupGloo.Device cannot
    hold them (another pybind11 ABI, another libgloo), omni.Error where Gloo cannot make one
    (RuntimeError: a conversion pybind11 refuses)."""
    make = getattr(omni._omni, "gloo_guarded_device", None)
    if make is None:
        raise AttributeError("this omni module has no gloo_guarded_device")
    names = [n for n in os.environ.get("GLOO_SOCKET_IFNAME", "").split(",") if n]
    if names:
        devices = [make(iface=n) for n in names]
    else:
        devices = [make(hostname=_local_address() or socket.gethostname())]
    if not all(isinstance(d, dist.ProcessGroupGloo.Device) for d in devices):
        raise TypeError("the guarded devices are %s, not torch's ProcessGroupGloo.Device" % type(devices[0]).__name__)
    return devices


@functools.lru_cache(maxsize=None)
def _guarded_gloo_class():
    """torch's ProcessGroupGloo with guarded devices (_guarded_devices), put in its place while
    torch.distributed builds the generation's group, so that the group is torch's Gloo group in
    every respect (backend "gloo", the default group, DDP) but for who may connect while it is
    built. None, after one warning, where the guard cannot be applied. Made once a process;
    each group it builds makes its own devices."""
    base = getattr(dist, "ProcessGroupGloo", None)
    if base is None or not hasattr(base, "_Options"):
        _gloo_guard_unavailable("this torch has no ProcessGroupGloo._Options")
        return None

    class GuardedProcessGroupGloo(base):
        # torch's own call: (store, rank, size, timeout=...) (1.13 to 2.14; 2.14 adds
        # enable_reconfigure=, which a guarded group does not take).
        def __init__(self, store, rank, size, timeout=datetime.timedelta(seconds=1800), **kwargs):
            devices = None
            if not any(kwargs.values()):
                try:
                    devices = _guarded_devices()
                    opts = base._Options()
                    opts._devices = devices
                    opts._threads = 2 * len(devices)   # as torch's own constructor
                    opts._timeout = timeout
                except (AttributeError, TypeError, RuntimeError, omni.Error) as e:
                    _gloo_guard_unavailable(str(e))
                    devices = None
            else:
                _gloo_guard_unavailable("torch asked for %s" % ", ".join(sorted(k for k, v in kwargs.items() if v)))
            if devices is None:
                super().__init__(store, rank, size, timeout=timeout, **kwargs)
            else:
                super().__init__(store, rank, size, opts)

    return GuardedProcessGroupGloo


@contextlib.contextmanager
def _gloo_guarded(enabled):
    """While torch.distributed builds a group: its Gloo groups with guarded pairs (where
    `enabled`; _guarded_gloo_class). torch looks ProcessGroupGloo up in distributed_c10d's
    globals when it builds a Gloo group."""
    c10d = getattr(dist, "distributed_c10d", None)
    cls = _guarded_gloo_class() if enabled and c10d is not None else None
    if cls is None or getattr(c10d, "ProcessGroupGloo", None) is not cls.__bases__[0]:
        if enabled and cls is not None:
            _gloo_guard_unavailable("torch.distributed.distributed_c10d has no ProcessGroupGloo to replace")
        yield
        return
    c10d.ProcessGroupGloo = cls
    try:
        yield
    finally:
        c10d.ProcessGroupGloo = cls.__bases__[0]


def _micro_seed(seed, step, micro):
    """The RNG seed of global micro-batch `micro` of optimizer step `step` (0-based): the same
    whatever the DP size, so dropout and friends draw the same numbers in every layout."""
    x = (int(seed) * 0x9E3779B97F4A7C15 + (int(step) << 20) + int(micro)) & 0xFFFFFFFFFFFFFFFF
    x ^= x >> 31
    x = (x * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 29)


class Job:
    """The elastic training job of this rank (see the module's text).

    dataset_size, global_batch, micro_batch, seed: the ledger's (libomni(3)): each step
    consumes global_batch samples of a per-epoch permutation of range(dataset_size), every
    sample once per epoch, split over the data-parallel ranks in micro-batches of
    micro_batch. ckpt: the checkpoint root (None: none); ckpt_every: steps between
    checkpoints (0: only at the job's end and when it is stopped); exact: see the module.
    backend: "gloo" or "nccl" for the process groups (default: nccl when the model is on a
    GPU). threads: the intra-op thread count exact mode fixes (default 1). balance, cost:
    grouped reordering (omni.data_balance): a policy name and cost(index, step) -> int.
    bucket_mb: the gradient buckets' size. ddp: wrap the model in DistributedDataParallel on
    every generation's group; the loop then calls job.module(x) (this generation's wrapper)
    instead of model(x), and DDP averages the gradients (float only: not with exact).
    ckpt_incremental: each checkpoint after the first writes only what changed since the
    newest one (found by hashing, or named by job.unchanged).
    """

    def __init__(self, model, optimizer, scheduler=None, *, dataset_size, global_batch, micro_batch, seed=0,
                 ckpt=None, ckpt_every=0, exact=False, backend=None, threads=1, balance=None, cost=None,
                 bucket_mb=25, ddp=False, ckpt_incremental=False, timeout=datetime.timedelta(seconds=300)):
        if not isinstance(model, torch.nn.Module):
            raise TypeError("Job(): model: expected a torch.nn.Module, got a %s" % type(model).__name__)
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError("Job(): optimizer: expected a torch.optim.Optimizer, got a %s" % type(optimizer).__name__)
        if ckpt_every < 0:
            raise ValueError("Job(): ckpt_every: %r is negative; expected steps between checkpoints, or 0" % ckpt_every)
        if ddp and exact:
            raise ValueError("Job(): ddp=True and exact=True do not go together: DistributedDataParallel sums "
                             "gradients in floating point, in an order that depends on the DP size")
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.global_batch, self.micro_batch, self.seed = int(global_batch), int(micro_batch), int(seed)
        self.ckpt, self.ckpt_every, self.exact = ckpt, int(ckpt_every), bool(exact)
        self.incremental = bool(ckpt_incremental)
        #: Names of model tensors (state_dict keys) the caller knows have not changed since the
        #: last checkpoint (a frozen encoder): an incremental checkpoint references them
        #: without comparing them.
        self.unchanged = set()
        self.timeout = timeout
        self._params = [p for p in model.parameters() if p.requires_grad]
        if not self._params:
            raise ValueError("Job(): the model has no parameter that requires a gradient")
        self._device = self._params[0].device
        self.backend = backend or ("nccl" if self._device.type == "cuda" else "gloo")
        if self.exact:
            torch.set_num_threads(int(threads))
        self._bucket_elems = max(1, int(bucket_mb * (1 << 20)) // 4)
        self.process_group = None
        self._ddp = bool(ddp)
        self.module = model       # what the loop calls: the model, or this generation's DDP wrapper
        self.last_loss = None
        self.last_rank = None     # this rank's DP rank when the job ended (None: it left)
        self._loss_acc = None
        self._acc = None
        self._micro = None
        self._failed = None       # the exception of a collective that failed in this step
        self.dropped = False      # the last step() dropped its step (a peer died in it)
        self._stopped = False
        self.events = []          # (step, kind, world) of every change this rank saw

        # SIGTERM (Slurm preempting or cancelling the job with a grace time) stops the job at
        # the next boundary with a checkpoint there. Handled here, before omni.init(), so
        # that libomni leaves it to us: a thread torch started earlier (its intra-op pool)
        # could otherwise take the signal's default action and kill the process.
        self._sigterm = False
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, self._on_sigterm)
        omni.init()
        if not omni.standalone():
            _bind_collectives()
        omni.data_configure(dataset_size, self.seed, self.global_batch, self.micro_batch)
        if balance:
            omni.data_balance(balance, cost)
        self.step_count, rewind = omni.start()
        joined = self.step_count > 0 and not rewind
        self._new_group()
        if joined:
            self._receive_state()
            self.events.append((self.step_count, "joined", self.world))
            # The survivors checkpoint after the boundary this rank joined at, when that step
            # is due one; the save's barrier takes every rank of the new group, this one too.
            self._checkpoint_due("reshaped")
        else:
            # A fresh start or a rewind: the newest checkpoint, else rank 0's model for all.
            if not (self.ckpt and self._load_latest()):
                self._broadcast_state(model_only=True)
            self.events.append((self.step_count, "rewind" if rewind else "start", self.world))

    # ---- who we are -------------------------------------------------------------------------
    @property
    def rank(self):
        return omni.group_info(omni.DP)[0]

    @property
    def world(self):
        return omni.group_info(omni.DP)[1]

    @property
    def grad_accum(self):
        return omni.data_grad_accum()

    # ---- the loop -----------------------------------------------------------------------------
    def steps(self, total):
        """Yields the number of each optimizer step to run (1-based), until `total` steps are
        done or the job stops or this rank leaves; a rewind goes back to the checkpoint's."""
        while not self._stopped and self.step_count < total:
            yield self.step_count + 1
        if not self._stopped:
            if self.ckpt and not (self.ckpt_every and self.step_count % self.ckpt_every == 0):
                self.save()
            self._finish()

    def micro_batches(self):
        """This rank's sample indices (a list of ints) of each micro-batch of the step. The
        RNG is seeded per global micro-batch before each one (see _micro_seed)."""
        ga = omni.data_grad_accum()
        for micro in range(ga):
            idx = omni.data_micro_batch(micro).tolist()
            self._micro = len(idx)
            torch.manual_seed(_micro_seed(self.seed, self.step_count, self.rank * ga + micro) & 0x7FFFFFFFFFFFFFFF)
            # DDP reduces at the last micro-batch's backward only.
            quiet = self._ddp and micro < ga - 1 and self.module is not self.model
            with (self.module.no_sync() if quiet else contextlib.nullcontext()):
                yield idx
        self._micro = None

    def backward(self, loss):
        """Backward of one micro-batch's loss, a mean over its samples: scaled by its share of
        the global batch, so that the sum over micro-batches and ranks is the batch's mean."""
        if self._micro is None:
            raise omni.StateError("Job.backward(): call it inside the loop over job.micro_batches()")
        scale = self._micro / self.global_batch
        if self.exact:
            for p in self._params:
                p.grad = None
        if self._ddp:
            # DDP averages over the ranks: its mean of these is the global batch's mean.
            try:
                (loss * scale * self.world).backward()
            except RuntimeError as e:  # DDP's allreduce inside the backward: a peer died
                if self._failed is None and dist.is_initialized() and _is_comm_failure(e):
                    self._failed = e
                    return
                raise
        else:
            (loss * scale).backward()
        value = float(loss.detach()) * scale
        if self.exact:
            self._fixed_accumulate()
            self._loss_acc = (self._loss_acc or 0) + int(round(value * 2.0 ** FIXED_BITS))
        else:
            self._loss_acc = (self._loss_acc or 0.0) + value

    def _on_sigterm(self, signum, frame):
        self._sigterm = True

    def all_reduce(self, tensor):
        """A sum over this generation's DP group, in place, for the loop's own figures: a
        contiguous float32, bfloat16 or int64 tensor (omni.allreduce). Should a peer die in
        it, the failure is not raised: job.step() then recovers as from a failure of its own
        collectives. Returns the tensor."""
        if self._failed is None:
            try:
                omni.allreduce(tensor, op="sum")
            except omni.CommError as e:
                self._failed = e
        return tensor

    def step(self):
        """The end of an optimizer step: gradients averaged over the DP group, the optimizer
        and scheduler stepped, the boundary met. Returns the boundary's decision kind. When a
        peer died during the step (a collective failed), the step is dropped and the job
        recovers: the survivors meet at the boundary, which answers REWIND, and go back to
        the last checkpoint; steps() then yields the steps after it again."""
        if self._failed is None:
            try:
                self._average_gradients()
            except omni.CommError as e:
                self._failed = e
        self.dropped = self._failed is not None
        if self.dropped:
            return self._recover()
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step_count += 1
        if self._sigterm:
            self._sigterm = False
            if omni.standalone():
                if self.ckpt:
                    self.save()
                self._finish()
                return "stop"
            omni.request_stop("SIGTERM to rank %d" % self.rank)
        # The checkpoint after the boundary, which commits the step to the ledger: a
        # checkpoint of step N holds the ledger of N steps.
        kind = self._boundary()
        self._checkpoint_due(kind)
        return kind

    def _checkpoint_due(self, kind):
        if (kind in ("continue", "reshaped") and self.ckpt and self.ckpt_every and
                self.step_count % self.ckpt_every == 0):
            self.save(periodic=True)

    # ---- gradients ----------------------------------------------------------------------------
    def _fixed_accumulate(self):
        if self._acc is None:
            self._acc = [torch.zeros(p.numel(), dtype=torch.int64, device=p.device) for p in self._params]
        for p, acc in zip(self._params, self._acc):
            if p.grad is None:
                continue
            g = p.grad.detach().reshape(-1).to(torch.float64)
            if bool((g.abs() > FIXED_LIMIT).any()):
                raise omni.InvalidArgument("exact mode: a gradient element of %s exceeds %g; exact mode takes "
                                           "|g| <= %g (scale the loss down)" % (self._name(p), float(g.abs().max()),
                                                                                FIXED_LIMIT))
            acc += torch.round(g * 2.0 ** FIXED_BITS).to(torch.int64)
            p.grad = None

    def _name(self, p):
        for n, q in self.model.named_parameters():
            if q is p:
                return n
        return "a parameter"

    def _average_gradients(self):
        loss = self._loss_acc if self._loss_acc is not None else (0 if self.exact else 0.0)
        self._loss_acc = None
        if self._ddp:
            t = torch.tensor([loss], dtype=torch.float32)
            omni.allreduce(t, op="sum")
            self.last_loss = float(t[0])
            return
        if self.exact:
            acc = self._acc or [torch.zeros(p.numel(), dtype=torch.int64, device=p.device) for p in self._params]
            flat = torch.cat(acc + [torch.tensor([loss], dtype=torch.int64, device=self._device)])
            for lo in range(0, flat.numel(), self._bucket_elems):
                omni.allreduce(flat[lo:lo + self._bucket_elems], op="sum")
            off = 0
            for p, a in zip(self._params, acc):
                n = p.numel()
                p.grad = (flat[off:off + n].to(torch.float64) / 2.0 ** FIXED_BITS).to(p.dtype).view_as(p)
                off += n
                a.zero_()
            self.last_loss = float(flat[-1]) / 2.0 ** FIXED_BITS
            return
        grads = []
        for p in self._params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grads.append(p.grad.reshape(-1))
        flat = torch.cat(grads + [torch.tensor([loss], dtype=grads[0].dtype, device=self._device)])
        for lo in range(0, flat.numel(), self._bucket_elems):
            omni.allreduce(flat[lo:lo + self._bucket_elems], op="sum")
        off = 0
        for p in self._params:
            n = p.numel()
            p.grad.copy_(flat[off:off + n].view_as(p))
            off += n
        self.last_loss = float(flat[-1])

    # ---- boundaries -------------------------------------------------------------------------
    def _boundary(self):
        d = omni.boundary(self.step_count)
        kind = omni.KIND_NAMES[d.kind]
        if d.kind == omni.CONTINUE:
            return kind
        self.events.append((self.step_count, kind, d.world))
        if d.kind == omni.RESHAPED:
            self._new_group()
            if d.units_joined:
                self._broadcast_state()
        elif d.kind == omni.REWIND:
            self._new_group()
            if not (self.ckpt and self._load_latest()):
                raise omni.StateError("Job: ranks were lost at step %d and there is no checkpoint to rewind to "
                                      "(give ckpt= and ckpt_every=)" % self.step_count)
        elif d.kind == omni.STOP:
            if self.ckpt:
                try:
                    self.save()
                except (omni.CheckpointError, OSError) as e:
                    raise omni.CheckpointError("Job: stopping at step %d: its checkpoint was not written (%s); a "
                                               "restart resumes from the newest one, %s" %
                                               (self.step_count, e, self._newest())) from None
            self._finish()
        elif d.kind == omni.LEFT:
            self._finish(left=True)
        return kind

    def _recover(self):
        """After a failed collective: the step's work is dropped, and the boundary of the step
        being trained tells what the job does (REWIND after a loss; STOP when too few are
        left)."""
        failure, self._failed = self._failed, None
        # The generation's torch.distributed group goes too: a collective of the loop's own
        # still waiting on this rank fails instead of waiting out the group's timeout.
        self._close_group()
        self._loss_acc = None
        self.optimizer.zero_grad(set_to_none=True)
        for a in self._acc or []:
            a.zero_()
        if omni.standalone():
            raise omni.CommError("Job.step(): a collective failed in a standalone run: %s" % failure)
        d = omni.boundary(self.step_count + 1)
        if d.kind not in (omni.REWIND, omni.STOP, omni.LEFT):
            raise omni.CommError("Job.step(): a collective failed (%s) and the coordinator answered %s, not rewind"
                                 % (failure, omni.KIND_NAMES[d.kind]))
        self.events.append((self.step_count, omni.KIND_NAMES[d.kind], d.world))
        if d.kind == omni.REWIND:
            self._new_group()
            if not (self.ckpt and self._load_latest()):
                raise omni.StateError("Job: ranks were lost at step %d and there is no checkpoint to rewind to "
                                      "(give ckpt= and ckpt_every=)" % (self.step_count + 1))
        else:
            self._finish(left=d.kind == omni.LEFT)
        return omni.KIND_NAMES[d.kind]

    def _close_group(self):
        """Destroys the generation's group. No reference may outlive it: a group object still
        held keeps its connections open, and peers waiting on them then wait out the timeout."""
        self.process_group = None
        self.module = self.model
        if dist.is_initialized():
            dist.destroy_process_group()
        gc.collect()

    def _new_group(self):
        """The process group of the current generation, as the default group too."""
        self._close_group()
        rank, size = omni.group_info(omni.DP)
        store = dist.HashStore() if omni.standalone() else Store(omni.generation(), self.timeout)
        # Gloo's connections are libomni's to cut should a peer be declared lost (hung, not
        # dead): a collective waiting on it then fails at once, not at the group's timeout.
        adopt = self.backend == "gloo" and size > 1 and not omni.standalone()
        if adopt:
            omni.sockets_begin()
        # Gloo's pair listeners take only a connection that first sends the pair's token, which
        # travels with the pair's address through the coordinator's store (libomni's guard):
        # not while standalone, whose HashStore is this process's own.
        with _gloo_guarded(self.backend == "gloo" and not omni.standalone()):
            dist.init_process_group(self.backend, store=store, rank=rank, world_size=size, timeout=self.timeout)
        if adopt:
            omni.sockets_adopt(size - 1)
        self.process_group = dist.group.WORLD
        if self._ddp:
            # Wrapped again on every generation's group (its constructor sends rank 0's
            # parameters to all, which the hand-off would do too).
            ids = [self._device.index] if self._device.type == "cuda" else None
            self.module = torch.nn.parallel.DistributedDataParallel(self.model, device_ids=ids,
                                                                    process_group=self.process_group)

    def _finish(self, left=False):
        if self._stopped:
            return
        self._stopped = True
        self.last_rank = None if left else omni.group_info(omni.DP)[0]
        self._close_group()
        omni.finalize()

    # ---- state hand-off -----------------------------------------------------------------------
    def state(self):
        """Everything a rank needs to go on: model, optimizer, scheduler, step."""
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
                "step": self.step_count}

    def _apply(self, state, model_only=False):
        self.model.load_state_dict(state["model"])
        if model_only:
            return
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and state["scheduler"] is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        self.step_count = state["step"]

    def _broadcast_state(self, model_only=False):
        """Rank 0 (a survivor: joiners get new, higher unit ids) sends its state to every rank
        of the new group; the others load it. As JSON and raw tensor bytes, never pickle:
        what arrives over the network does not run code."""
        dev = self._device if self.backend == "nccl" else torch.device("cpu")
        blob = pack_state(self.state()) if self.rank == 0 else b""
        size = torch.tensor([len(blob)], dtype=torch.int64, device=dev)
        dist.broadcast(size, src=0, group=self.process_group)
        data = (torch.frombuffer(bytearray(blob), dtype=torch.uint8).to(dev) if self.rank == 0
                else torch.empty(int(size.item()), dtype=torch.uint8, device=dev))
        dist.broadcast(data, src=0, group=self.process_group)
        if self.rank != 0:
            self._apply(unpack_state(data.cpu().numpy().tobytes()), model_only)

    def _receive_state(self):
        self._broadcast_state()

    # ---- checkpoints --------------------------------------------------------------------------
    def save(self, periodic=False):
        """Writes a checkpoint of the step (DP rank 0 writes, every rank waits), readable by
        omni-ckpt, h5py and omni.ckpt.load_state_dict; returns its path on rank 0. Should it
        fail (a full file system, say), its files are removed, the earlier checkpoints and
        `latest` stay as they were, and omni.CheckpointError (or OSError) is raised on rank
        0; with periodic=True (the job's own every-ckpt_every checkpoints) a warning is
        printed instead and training goes on, the next one trying again."""
        unknown = sorted(self.unchanged - set(self.model.state_dict()))
        if unknown:
            raise ValueError("Job.save(): job.unchanged names %s, which the model's state_dict does not hold" %
                             ", ".join(unknown[:5]))
        path = None
        if self.rank == 0:
            # A rank fenced out while it was stopped writes nothing (omni.check_member).
            if not omni.standalone():
                omni.check_member()
            base = None
            if self.incremental and os.path.lexists(os.path.join(self.ckpt, "latest")):
                base = os.path.realpath(os.path.join(self.ckpt, "latest"))
            generation = omni.generation()
            try:
                path = save_checkpoint(self.ckpt, self.step_count, self.state(), omni.data_save(),
                                       generation=generation, world=self.world, seed=self.seed, base=base,
                                       unchanged={"model/" + k for k in self.unchanged})
            except (omni.CheckpointError, OSError) as e:
                try:
                    omni.abandon(self.ckpt, self.step_count, attempt=str(generation))
                except omni.CheckpointError as e2:
                    print("omni.torch: removing the unwritten checkpoint of step %d: %s" % (self.step_count, e2),
                          file=sys.stderr)
                if not periodic:
                    raise
                print("omni.torch: checkpoint of step %d not written (%s); training goes on; the newest "
                      "checkpoint is %s" % (self.step_count, e, self._newest()), file=sys.stderr, flush=True)
            else:
                if not omni.standalone():
                    omni.checkpoint_done(self.step_count, path)
        dist.barrier(group=self.process_group)
        return path

    def _newest(self):
        latest = os.path.join(self.ckpt, "latest")
        return os.path.basename(os.path.realpath(latest)) if os.path.lexists(latest) else "none"

    def _load_latest(self):
        try:
            r = omni.CheckpointReader(self.ckpt, latest=True)
        except omni.CheckpointError:
            return False
        state, ledger = read_checkpoint(r, self.model, self.optimizer, self.scheduler)
        self._apply(state)
        omni.data_load(ledger)
        return True


# ---- the hand-off format ---------------------------------------------------------------------
# A state (Job.state()) as bytes: an 8-byte length, a JSON header where every tensor is
# {"__tensor__": [dtype, shape, offset, nbytes]}, then the tensors' raw bytes.

_TORCH_DTYPES = {str(d): d for d in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
                                     torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)}


def pack_state(state):
    chunks, offset = [], 0

    def enc(v):
        nonlocal offset
        if torch.is_tensor(v):
            t = v.detach().cpu().contiguous()
            if str(t.dtype) not in _TORCH_DTYPES:
                raise TypeError("hand-off: a tensor of %s cannot travel" % t.dtype)
            raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
            chunks.append(raw)
            entry = {"__tensor__": [str(t.dtype), list(t.shape), offset, len(raw)]}
            offset += len(raw)
            return entry
        if isinstance(v, dict):
            return {"__dict__": [[enc(k), enc(x)] for k, x in v.items()]}
        if isinstance(v, (list, tuple)):
            return {"__list__" if isinstance(v, list) else "__tuple__": [enc(x) for x in v]}
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        raise TypeError("hand-off: a %s in the training state cannot travel (expected tensors, numbers, strings, "
                        "lists and dicts)" % type(v).__name__)

    header = json.dumps(enc(state)).encode()
    return struct.pack("<Q", len(header)) + header + b"".join(chunks)


def unpack_state(blob):
    (n,) = struct.unpack_from("<Q", blob, 0)
    body = memoryview(blob)[8 + n:]

    def dec(v):
        if isinstance(v, dict):
            if "__tensor__" in v:
                dtype, shape, off, nbytes = v["__tensor__"]
                t = torch.frombuffer(bytearray(body[off:off + nbytes]), dtype=torch.uint8) if nbytes else \
                    torch.zeros(0, dtype=torch.uint8)
                return t.view(_TORCH_DTYPES[dtype]).reshape(shape)
            if "__dict__" in v:
                return {dec(k): dec(x) for k, x in v["__dict__"]}
            if "__list__" in v:
                return [dec(x) for x in v["__list__"]]
            if "__tuple__" in v:
                return tuple(dec(x) for x in v["__tuple__"])
        return v

    return dec(json.loads(bytes(blob[8:8 + n]).decode()))


# ---- the checkpoint format -------------------------------------------------------------------
# Tensors by their state_dict names: "model/<key>", "optimizer/state/<index>/<key>"; opaque
# state as uint8 tensors of JSON text: "optimizer/meta" (param_groups, the state's other values
# and every tensor's shape), "scheduler" (its state_dict), "ledger" (omni.data_save's). JSON,
# not pickle: loading a checkpoint never runs code from it. Meta: step, seed.

_DTYPES = {torch.float32: None, torch.bfloat16: None, torch.float16: None, torch.int64: None, torch.uint8: None}


def _host(t, name):
    t = t.detach().cpu().contiguous()
    if t.dtype not in _DTYPES:
        raise TypeError("checkpoint: %s is %s; slurm-omni checkpoints hold float32, bfloat16, float16, int64 and "
                        "uint8 tensors" % (name, t.dtype))
    return t.reshape(1) if t.dim() == 0 else t


def _bytes_tensor(b):
    return torch.frombuffer(bytearray(b), dtype=torch.uint8) if b else torch.zeros(0, dtype=torch.uint8)


def save_checkpoint(root, step, state, ledger, generation=0, world=1, seed=0, base=None, unchanged=()):
    """Writes and commits a checkpoint of `state` (Job.state()) as one writer. With `base` (an
    earlier checkpoint of the root) it is incremental: a tensor equal to the base's is
    referenced, not written; the tensors named in `unchanged` ("model/KEY") are referenced
    without being compared (the caller knows they did not change)."""
    w = omni.CheckpointWriter(root, step, 0, attempt=str(generation), base=base)
    try:
        return _write_checkpoint(w, root, step, state, ledger, generation, world, seed, base, unchanged)
    finally:
        w.close()  # at once, also after a failure: not whenever the traceback lets it go


def _write_checkpoint(w, root, step, state, ledger, generation, world, seed, base, unchanged):
    shapes = {}

    def add(name, t):
        shapes[name] = list(t.shape)
        t = _host(t, name)
        if t.numel() == 0:
            return
        w.add_tensor(name, t, change="unchanged" if base and name in unchanged else "detect")

    for k, v in state["model"].items():
        add("model/" + k, v)
    opt = state["optimizer"]
    other = {}
    for idx, s in opt["state"].items():
        for k, v in s.items():
            if torch.is_tensor(v):
                add("optimizer/state/%d/%s" % (idx, k), v)
            else:
                other["%d/%s" % (idx, k)] = v
    meta = {"param_groups": opt["param_groups"], "other": other, "shapes": shapes}
    w.add_tensor("optimizer/meta", _bytes_tensor(json.dumps(meta).encode()))
    if state.get("scheduler") is not None:
        try:
            text = json.dumps(state["scheduler"])
        except TypeError as e:
            raise TypeError("checkpoint: the scheduler's state_dict is not JSON data (%s); slurm-omni checkpoints "
                            "keep opaque state as JSON" % e) from None
        w.add_tensor("scheduler", _bytes_tensor(text.encode()))
    w.add_tensor("ledger", _bytes_tensor(ledger.encode()))
    w.add_rank_state(0, struct.pack("<Q", step))
    w.finish()
    return omni.commit(root, 1, attempt=str(generation),
                       meta={"step": step, "generation": generation, "world_size": world, "seed": seed})


def _read(r, name, dtype_names):
    a = r.read(name)
    if dtype_names.get(name) == "bfloat16":
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


def read_checkpoint(r, model, optimizer, scheduler):
    names = {n: dt for n, dt, _ in r.tensors()}
    meta = json.loads(bytes(r.read("optimizer/meta")).decode())
    shapes = meta["shapes"]

    def tensor(name):
        if name not in names:  # an empty tensor is not stored
            return torch.zeros(shapes[name])
        return _read(r, name, names).reshape(shapes[name])

    model_sd = {}
    for k, v in model.state_dict().items():
        name = "model/" + k
        if name not in shapes:
            raise omni.CheckpointError("checkpoint: it holds no %s (the model differs from the checkpoint's)" % name)
        model_sd[k] = tensor(name).to(v.dtype)
    opt_state = {}
    for name in shapes:
        if name.startswith("optimizer/state/"):
            idx, key = name[len("optimizer/state/"):].split("/", 1)
            opt_state.setdefault(int(idx), {})[key] = tensor(name)
    for key, v in meta["other"].items():
        idx, k = key.split("/", 1)
        opt_state.setdefault(int(idx), {})[k] = v
    step = r.meta()["step"]
    state = {"model": model_sd, "optimizer": {"state": opt_state, "param_groups": meta["param_groups"]},
             "scheduler": json.loads(bytes(r.read("scheduler")).decode()) if "scheduler" in names else None,
             "step": step}
    return state, bytes(r.read("ledger")).decode()


def load_state_dict(path):
    """The model's state_dict from a slurm-omni checkpoint (a checkpoint directory, or a root
    whose newest checkpoint is read), for a plain PyTorch program: {key: tensor}."""
    r = omni.CheckpointReader(path, latest=os.path.lexists(os.path.join(path, "latest")))
    names = {n: dt for n, dt, _ in r.tensors()}
    shapes = json.loads(bytes(r.read("optimizer/meta")).decode())["shapes"] if "optimizer/meta" in names else {}
    out = {}
    for n in names:
        if n.startswith("model/"):
            t = _read(r, n, names)
            out[n[len("model/"):]] = t.reshape(shapes[n]) if n in shapes else t
    return out
