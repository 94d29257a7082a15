import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer1 = nn.Linear(1024, 1024)
        self.layer2 = nn.Linear(1024, 1024)
        self.layer3 = nn.Linear(1024, 1024)
        self.head = nn.Linear(1024, 10)

    def forward(self, x):
        return self.head(torch.relu(self.layer3(torch.relu(self.layer2(torch.relu(self.layer1(x)))))))


dist.init_process_group("nccl")
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
model = DDP(Net().cuda(), device_ids=[local_rank])
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(1, 201):
    x = torch.randn(64, 1024, device="cuda")
    loss = model(x).logsumexp(dim=1).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    if step % 20 == 0:
        print(f"step {step}/200 loss {loss.item():.4f}", flush=True)
dist.destroy_process_group()
