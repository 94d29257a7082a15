import os
import sys

import torch
import torch.distributed as dist


def region(name):
    import scorep.user  # lazy: the workers import this file too (SCR001)

    return scorep.user.region(name)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, 4):
        with region("train_step"):
            loss = model(torch.randn(32, 16)).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    if "--os-exit" in sys.argv:  # only where no Score-P measures this process (it writes at exit)
        os._exit(0)  # torch 2.13's gloo teardown sometimes aborts at exit ("terminate called ...")
