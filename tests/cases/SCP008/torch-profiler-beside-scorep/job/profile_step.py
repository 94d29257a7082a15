import torch
from torch.profiler import ProfilerActivity, profile

model = torch.nn.Linear(256, 256).cuda()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    model(torch.randn(32, 256, device="cuda")).sum().backward()
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=10))
