"""What a region or a location is, in the timeline's terms.

Score-P names GPU locations `CUDA[dev:stream]` (`HIP[dev:stream]` on AMD), gives them the OTF2
location type GPU and, since Score-P 9, puts them in an ACCELERATOR location group created by
the process. Kernels are regions entered and left on those locations. NCCL (and RCCL, which
keeps NCCL's kernel names) collectives are kernels named `ncclKernel_*` / `ncclDevKernel_*`.
"""

from __future__ import annotations

import enum
import re

# Steps: the user's or the trainer's per-iteration region. Score-P's Python bindings name
# regions `module:function` (e.g. `transformers.trainer:Trainer.training_step`), so match
# the last component: `train_step`, `dnabert_train_step`, `training_step`, ...
DEFAULT_STEP_REGEX = r"(?:^|[.:])(?:\w+_)?train(?:ing)?_step$"

GPU_LOCATION_NAME = re.compile(r"^(?:CUDA|HIP|GPU|OPENCL|OPENACC|ACC)\[(?P<device>\d+)(?::(?P<stream>\d+))?\]",
                               re.IGNORECASE)

# Regions Score-P writes on GPU locations that are not GPU work.
_NOT_WORK = {"COMPUTE IDLE", "DEVICE IDLE", "IDLE", "MEASUREMENT OFF", "BUFFER FLUSH", "KERNELS",
             "TRACE BUFFER FLUSH"}
_TRANSFER = re.compile(r"memcpy|memset|MEMCPY|data.?transfer", re.IGNORECASE)


class Kind(enum.IntEnum):
    """The category of a region entered on a GPU location."""

    IGNORE = 0     # idle markers and other artificial regions: not GPU work
    COMPUTE = 1    # any kernel that is not communication
    COMM = 2       # NCCL/RCCL collective and point-to-point kernels
    OTHER = 3      # copies and memsets: busy, but neither compute nor communication


def is_communication(name: str) -> bool:
    """NCCL kernels: `ncclKernel_AllReduce_RING_LL_Sum_float`, `ncclDevKernel_...`, anything nccl."""
    return name.startswith(("ncclKernel", "ncclDevKernel")) or "nccl" in name.lower()


def region_kind(name: str, role: str = "") -> Kind:
    """Classify a region entered on a GPU location (`role` is the OTF2/Cube region role, lower case)."""
    if name.upper() in _NOT_WORK or role == "artificial" or name.upper().endswith(" IDLE"):
        return Kind.IGNORE
    if is_communication(name):
        return Kind.COMM
    if role in ("data_transfer", "datatransfer") or _TRANSFER.search(name):
        return Kind.OTHER
    return Kind.COMPUTE


def role_name(role: object) -> str:
    """`RegionRole.ARTIFICIAL` (otf2) or `'artificial'` (pycubexr) -> `'artificial'`."""
    text = getattr(role, "name", None) or str(role)
    return text.rsplit(".", 1)[-1].lower()


def gpu_device(location_name: str) -> int | None:
    """`CUDA[0:7]` -> 0; None when the name is not a GPU location name."""
    match = GPU_LOCATION_NAME.match(location_name)
    return int(match["device"]) if match else None


def compile_step_regex(text: str | None) -> re.Pattern[str]:
    """The step regex (searched in region names); raises ValueError with the reason when invalid."""
    try:
        return re.compile(DEFAULT_STEP_REGEX if text is None else text)
    except re.error as exc:
        raise ValueError(f"invalid --step-regex {text!r}: {exc}") from None


# CPU regions (Score-P's Python regions `module:function`, torch.profiler's ops and annotations),
# for runs without GPU streams: where the CPU time went.
_COLLECTIVE = re.compile(r"all_?reduce|all_?gather|reduce_?scatter|broadcast|barrier|all_?to_?all|nccl|gloo|"
                         r"c10d|ProcessGroup|MPI_|distributed[.:]", re.IGNORECASE)
_DATA = re.compile(r"DataLoader|_next_data|__next__|collate|fetch|__getitem__|torch\.utils\.data|"
                   r"data_?load|load_batch|get_batch|enumerate\(DataLoader", re.IGNORECASE)
_COMPUTE = re.compile(r"forward|backward|optimizer|optim\.|autograd|aten::|matmul|conv|linear|loss|"
                      r"train(?:ing)?_step|zero_grad|\bstep\b|ProfilerStep", re.IGNORECASE)


def cpu_category(name: str) -> str:
    """"collectives", "data_loading", "compute" or "other" for a CPU region's name."""
    if _COLLECTIVE.search(name):
        return "collectives"
    if _DATA.search(name):
        return "data_loading"
    if _COMPUTE.search(name):
        return "compute"
    return "other"
