import torch


def prefetch(batch, side_stream):
    with torch.cuda.stream(side_stream):
        side_stream.wait_stream(torch.cuda.current_stream())
        return batch.to("cuda", non_blocking=True)


def main():
    side = torch.cuda.Stream()
    batch = torch.randn(1024, 1024).pin_memory()
    out = prefetch(batch, side)
    torch.cuda.current_stream().wait_stream(side)
    print(out.sum().item())


if __name__ == "__main__":
    main()
