"""Score-P user regions for the training loop."""
import contextlib

import scorep.user


@contextlib.contextmanager
def timed(name):
    scorep.user.region_begin(name)
    try:
        yield
    finally:
        scorep.user.region_end(name)
