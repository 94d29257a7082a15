"""torchrun as a plain script: `python -m scorep` runs files, not console entry points."""

from torch.distributed.run import main

if __name__ == "__main__":
    main()
