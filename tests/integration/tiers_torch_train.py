#!/usr/bin/env python3
"""A tiny data-parallel job (gloo on CPU) for the multi-tier checkpoint tests, started by torchrun on
several "nodes". Deterministic: the batch of a step depends on (seed, rank, step) only, and a
checkpoint holds the model and the optimizer (SGD with momentum), so a resumed run ends bit
for bit where an uninterrupted one does.

TRAIN_API=files: every rank saves rank-R.pt with ``jobside.save`` (the plain file API).
TRAIN_API=dcp: ``torch.distributed.checkpoint.async_save`` into ``jobside.save(step,
commit=False)``, then ``jobside.commit(step, after=future)`` (returns at once: the drainer
commits the part once the future is done). Restore: ``jobside.restore()`` + torch.load /
dcp.load. TRAIN_DIE_AT / TRAIN_DRAIN_BEFORE_DIE as in tiers_rank.py. Rank 0 writes the
final weights' sha256 to TRAIN_RESULT.
"""

import hashlib
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from launcher import jobside

E = os.environ.get
steps, every = int(E("TRAIN_STEPS", "40")), int(E("TRAIN_EVERY", "10"))
api, die_at = E("TRAIN_API", "files"), int(E("TRAIN_DIE_AT", "-1"))
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
ckpt_group = dist.new_group(backend="gloo")  # async_save's collectives run beside training's
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
# Data parallel by hand: one flat all_reduce per step, so the order of every float sum is the
# same in every run (DDP rebuilds its buckets after a start's first step, which changes it).
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def batch(step):
    g = torch.Generator().manual_seed(1000003 * step + rank)
    x = torch.randn(16, 32, generator=g)
    return x, x.sum(dim=1, keepdim=True).sin()


def state():
    return {"model": model.state_dict(), "opt": opt.state_dict()}


start = 0
with jobside.restore() as d:
    if d:
        start = int(E("LAUNCHER_RESUME_STEP"))
        if api == "dcp":
            msd, osd = get_state_dict(model, opt)  # the optimizer's state initialised, so DCP can fill it
            sd = {"model": msd, "opt": osd}
            dcp.load(sd, checkpoint_id=d, process_group=ckpt_group)
            set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["opt"])
        else:
            sd = torch.load(os.path.join(d, "rank-%d.pt" % rank), weights_only=True)
            assert sd["step"] == start
            model.load_state_dict(sd["model"])
            opt.load_state_dict(sd["opt"])
pending = None
for step in range(start + 1, steps + 1):
    x, y = batch(step)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    dist.all_reduce(flat)
    i = 0
    for p in model.parameters():
        n = p.numel()
        p.grad.copy_(flat[i:i + n].view_as(p) / world)
        i += n
    opt.step()
    if step % every == 0 and E("LAUNCHER_CKPT_ROOT"):
        if api == "dcp":
            if pending is not None:
                pending.result()  # DCP allows one async save in flight
            with jobside.save(step, commit=False) as d:
                msd, osd = get_state_dict(model, opt)
                pending = dcp.async_save({"model": msd, "opt": osd}, checkpoint_id=d, process_group=ckpt_group)
            jobside.commit(step, after=pending)
        else:
            with jobside.save(step) as d:
                torch.save({"step": step, **state()}, os.path.join(d, "rank-%d.pt" % rank))
    if step == die_at:
        if E("TRAIN_DRAIN_BEFORE_DIE") == "1":
            jobside.drain(120)
        os._exit(9)
if pending is not None:
    pending.result()
jobside.drain(120)
dist.barrier()
if rank == 0:
    h = hashlib.sha256()
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode() + v.numpy().tobytes())
    with open(E("TRAIN_RESULT"), "w") as f:
        json.dump({"sha256": h.hexdigest(), "resumed_from": start}, f)
dist.destroy_process_group()
