import torch
import torch.distributed as dist

dist.init_process_group("nccl")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1).cuda())
dist.destroy_process_group()
