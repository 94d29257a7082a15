"""`python -m doctor` is `gpu-doctor`."""

import sys

from doctor.cli import main

sys.exit(main())
