import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def train(steps=10):
    dist.init_process_group(backend="nccl")
    rank = int(os.environ.get("LOCAL_RANK", 0))
    model = DDP(torch.nn.Linear(8, 8).to(rank), device_ids=[rank])
    for _ in range(steps):
        model(torch.ones(4, 8, device=rank)).sum().backward()
    if dist.get_rank() == 0:
        torch.save(model.state_dict(), "model.pt")


if __name__ == "__main__":
    train()
