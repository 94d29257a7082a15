import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)
grad = torch.ones(1, device="cuda")
for step in range(2000):
    if rank == 1 and step == 1042:
        continue
    dist.all_reduce(grad)
dist.destroy_process_group()
