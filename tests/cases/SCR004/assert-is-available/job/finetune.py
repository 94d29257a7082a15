import argparse

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    assert torch.cuda.is_available(), "CUDA is required"
    device = torch.device("cuda")
    model = torch.nn.Linear(16, 16).to(device)
    for _ in range(args.epochs):
        model(torch.randn(8, 16, device=device)).sum().backward()


if __name__ == "__main__":
    main()
