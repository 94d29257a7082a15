import sys

from torch.distributed.run import main

sys.exit(main())
