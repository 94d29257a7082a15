# python -m scorep only runs files, so torchrun is started from this one.
from torch.distributed.run import main

if __name__ == "__main__":
    main()
