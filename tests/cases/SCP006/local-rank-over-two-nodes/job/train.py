"""ResNet-ish DDP training on random images; one process per GPU, ranks from Slurm or torchrun."""

import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    args = p.parse_args()
    for torch_name, slurm_name in (("RANK", "SLURM_PROCID"), ("LOCAL_RANK", "SLURM_LOCALID"),
                                   ("WORLD_SIZE", "SLURM_NTASKS")):
        os.environ.setdefault(torch_name, os.environ.get(slurm_name, "0"))
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = DDP(torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.Flatten(),
                                    torch.nn.LazyLinear(10)).cuda(), device_ids=[local_rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _epoch in range(args.epochs):
        for _step in range(50):
            x = torch.randn(args.batch_size, 3, 32, 32, device="cuda")
            loss = model(x).logsumexp(1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
