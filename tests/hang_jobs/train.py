"""A small gloo DDP-style loop on CPU that hangs the way real jobs do (tests/test_hang_*.py).

    python train.py --mode skip      # rank 1 skips the all_reduce of step 50, then waits in barrier
    python train.py --mode loader    # rank 1 sleeps in its data loader at step 50
    python train.py --mode gil       # rank 1 sleeps in C holding the GIL (ctypes.PyDLL) at step 50
    python train.py --mode healthy   # every rank runs --steps steps and exits
"""

import argparse
import ctypes
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

p = argparse.ArgumentParser()
p.add_argument("--mode", default="healthy")
p.add_argument("--steps", type=int, default=60)
p.add_argument("--at", type=int, default=50)
p.add_argument("--bad-rank", type=int, default=1)
p.add_argument("--step-s", type=float, default=0.01)
p.add_argument("--pg-timeout", type=float, default=0, help="collectives time out after this many seconds; "
               "then each rank dumps its Flight Recorder (what NCCL does by itself on a watchdog timeout)")
args = p.parse_args()

if args.pg_timeout:
    import datetime

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.pg_timeout))
else:
    dist.init_process_group("gloo")
rank = dist.get_rank()
stuck = rank == args.bad_rank


class Batches(Dataset):
    def __len__(self):
        return args.steps

    def __getitem__(self, index):
        if args.mode == "loader" and stuck and index == args.at:
            time.sleep(3600)  # a data loader that never returns: a dead NFS mount, a lock
        return torch.full((4,), float(index))


def train_step(batch):
    grad = batch * (rank + 1)
    dist.all_reduce(grad)
    return grad


def hold_the_gil():
    libc = ctypes.PyDLL(None)   # PyDLL: the GIL stays held during the call
    libc.sleep(3600)


def dump_flight_recorder():
    import torch._C._distributed_c10d as c10d

    with open(os.environ["TORCH_FR_DUMP_TEMP_FILE"] + str(rank), "wb") as fh:
        fh.write(c10d._dump_fr_trace())


def train():
    loader = DataLoader(Batches(), batch_size=None)
    for step, batch in enumerate(loader):
        if step == args.at and stuck and args.mode == "skip":
            print(f"step {step}: rank {rank} skips the all_reduce", flush=True)
            continue
        if step == args.at and stuck and args.mode == "gil":
            hold_the_gil()
        train_step(batch)
        print(f"step {step}/{args.steps} loss {1.0 / (step + 1):.4f}", flush=True)
        time.sleep(args.step_s)
    dist.barrier()


try:
    train()
except RuntimeError as exc:
    if not args.pg_timeout:
        raise
    print(f"rank {rank}: {exc}".splitlines()[0], flush=True)
    dump_flight_recorder()
    sys.stdout.flush()
    os._exit(1)
print(f"rank {rank} done", flush=True)
dist.destroy_process_group()
sys.stdout.flush()
os._exit(0)  # torch 2.13's gloo teardown at interpreter exit aborts ~1 run in 10-20 (tests/launch_util.py)
