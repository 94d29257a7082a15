"""Score-P configuration values, parsed exactly as Score-P parses them.

Sizes follow `parse_size` in Score-P's `SCOREP_Config.c`: leading white
space, at least one digit, white space, one optional scale letter
K/M/G/T/P/E (powers of 1024, any case), one optional `B`, trailing white
space, nothing else. Sets follow `parse_bitset`: `none`/`no` is the empty
set; entries are split at space , : ; and a leading `~` removes an entry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

U64 = 2**64
TOTAL_MEMORY_LIMIT = 4294967295  # Score-P clamps SCOREP_TOTAL_MEMORY above this (4 GiB - 1)
PROPOSED_TOTAL_MEMORY = "3500M"  # under the clamp, room for CUDA traces (field guide, error 9)
DEFAULT_CUDA_BUFFER = 1 << 20  # SCOREP_CUDA_BUFFER's default
CUDA_BUFFER_PER_RANK = 1152 * 1024  # what one CUDA-recording rank needs before CUPTI drops records
FIELD_GUIDE_CUDA_BUFFER = 64 << 20  # the field guide's buffer for 8 ranks, where nothing proposes one
_SCALES = {"K": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}
_C_SPACE = " \t\n\v\f\r"


class SizeError(ValueError):
    """A size Score-P would reject; the message is Score-P's reason."""


def parse_size(value: str) -> int:
    """Bytes for a Score-P size value, or SizeError with Score-P's reason.

    >>> parse_size("3500M")
    3670016000
    >>> parse_size("4g")
    4294967296
    """
    i = 0
    n = len(value)
    while i < n and value[i] in _C_SPACE:
        i += 1
    start = i
    number = 0
    while i < n and value[i].isascii() and value[i].isdigit():
        new = (10 * number + ord(value[i]) - 48) % U64
        if new < number:
            raise SizeError(f"number too large in {value!r}")
        number = new
        i += 1
    if i == start:
        raise SizeError(f"can't parse size {value!r}: no digits")
    while i < n and value[i] in _C_SPACE:
        i += 1
    scale = 1
    has_b = False
    c = value[i].upper() if i < n else ""
    if c in _SCALES:
        scale = 1024 ** _SCALES[c]
        i += 1
    elif c == "B":
        has_b = True
        i += 1
    elif c != "":
        raise SizeError(f"invalid scale factor {value[i:]!r} in {value!r} (use K, M, G, T, P or E)")
    if not has_b and i < n and value[i].upper() == "B":
        i += 1
    while i < n and value[i] in _C_SPACE:
        i += 1
    if i != n:
        raise SizeError(f"unrecognized characters {value[i:]!r} after size in {value!r}")
    if (number * scale) % U64 < number:
        raise SizeError(f"size {value!r} does not fit into 64 bits")
    return number * scale


def format_size(n: int) -> str:
    """Score-P's `dump_size`: the largest exact unit (1048576 -> '1M')."""
    suffix = " KMGTPE"
    k = 0
    while n and n % 1024 == 0 and k < 6:
        n //= 1024
        k += 1
    return f"{n}{suffix[k].strip()}"


def proposed_cuda_buffer(minimum: int | None) -> int:
    """The SCOREP_CUDA_BUFFER to set for CUPTI's proposed minimum (or a rank count's need):
    a power-of-two MiB at least four times it, the field guide's 64M for 8889000.

    The one owner of this value: SCP004's message, ART004's log signature and the
    `scorep-cuda-buffer` remedy all take it from here.

    Without a minimum: the field guide's 64M.

    >>> format_size(proposed_cuda_buffer(8889000))
    '64M'
    """
    if not minimum:
        return FIELD_GUIDE_CUDA_BUFFER
    size = 8 << 20
    while size < 4 * minimum:
        size *= 2
    return size


def human(n: int) -> str:
    for unit, power in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << power:
            return f"{n / (1 << power):.3g} {unit}"
    return f"{n} B"


CUDA_ENABLE_ACCEPTED = (
    "runtime", "driver", "kernel", "kernel_serial", "kernel_counter", "kernel_callsite", "memcpy",
    "sync", "idle", "pure_idle", "gpumemusage", "references", "dontflushatexit", "flushatexit",
    "default", "yes", "1",
)

# Common misspellings -> what was meant.
_CUDA_ENABLE_SPELLINGS = {
    "kernels": "kernel", "memcopy": "memcpy", "memcpys": "memcpy", "mem_cpy": "memcpy",
    "synchronization": "sync", "synchronize": "sync", "syncs": "sync", "drivers": "driver",
    "runtime_api": "runtime", "driver_api": "driver", "true": "yes", "on": "yes", "all": "default",
    "gpu_memusage": "gpumemusage", "memusage": "gpumemusage", "callsite": "kernel_callsite",
    "counter": "kernel_counter", "pureidle": "pure_idle", "pure-idle": "pure_idle", "memory": "gpumemusage",
    "kernel-serial": "kernel_serial", "kernel-counter": "kernel_counter",
}


@dataclass(frozen=True)
class CudaEnable:
    """`SCOREP_CUDA_ENABLE` as Score-P reads it."""

    entries: tuple[str, ...]
    invalid: tuple[str, ...]
    disabled: bool  # none/no, or every entry removed
    separator: str = ","  # the first one the value uses (kept when the list is corrected)

    def proposed(self) -> str:
        """The list Score-P accepts: misspellings corrected (`kernels` -> `kernel`), unknown entries
        dropped, `pure_idle` dropped beside `idle` (they exclude each other). The one owner of the
        corrected value: SCP007's message and the `scorep-cuda-enable-fix` remedy use it."""
        import difflib

        out: list[str] = []
        for entry in self.entries:
            neg = entry.startswith("~")
            name = entry[1:] if neg else entry
            low = name.lower()
            if low not in CUDA_ENABLE_ACCEPTED:
                low = _CUDA_ENABLE_SPELLINGS.get(low) or next(
                    iter(difflib.get_close_matches(low, CUDA_ENABLE_ACCEPTED, 1, 0.75)), "")
                if not low:
                    continue
            fixed = ("~" if neg else "") + low
            if fixed not in out:
                out.append(fixed)
        if "idle" in out and "pure_idle" in out:
            out.remove("pure_idle")
        return self.separator.join(out) if out else "default"

    @property
    def conflicting(self) -> bool:
        names = {e.lower() for e in self.entries if not e.startswith("~")}
        return {"idle", "pure_idle"} <= names


def parse_cuda_enable(value: str) -> CudaEnable:
    if value.lower() in ("none", "no"):
        return CudaEnable((), (), True)
    entries: list[str] = []
    for part in _split_set(value):
        entries.append(part)
    invalid = tuple(e for e in entries if (e[1:] if e.startswith("~") else e).lower() not in CUDA_ENABLE_ACCEPTED)
    positive = [e for e in entries if not e.startswith("~")]
    seps = re.findall(r"[ ,:;]+", value.strip(_C_SPACE))
    return CudaEnable(tuple(entries), invalid, disabled=not positive, separator=seps[0] if seps else ",")


def _split_set(value: str) -> list[str]:
    out = []
    cur = ""
    for ch in value:
        if ch in " ,:;":
            if cur.strip(_C_SPACE):
                out.append(cur.strip(_C_SPACE))
            cur = ""
        else:
            cur += ch
    if cur.strip(_C_SPACE):
        out.append(cur.strip(_C_SPACE))
    return out


def is_true(value: str | None) -> bool:
    """Score-P's `parse_bool`: true/yes/on or a non-zero number."""
    if value is None:
        return False
    v = value.strip()
    if v.lower() in ("true", "yes", "on"):
        return True
    try:
        return int(v, 10) != 0
    except ValueError:
        return False
