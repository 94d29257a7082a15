"""How the ranks compare: one tiny all_gather on a gloo group of the canary's own, with the
default store as the side channel that names a rank that did not come.

A collective cannot say who is missing, and it cannot be left: gloo waits for a missing
rank until the group's timeout and the group is unusable afterwards; NCCL's watchdog would
even abort the process. So the canary never uses the training's process group: it gets its
own gloo group (created right after DDP's constructor, when every rank is known to be
there) with the canary's timeout, and before each all_gather every rank puts its digest in
the default store (`gpu-doctor-canary/d/STEP/RANK`). When the all_gather fails (a rank is
late, or gone), the ranks read the digests that did come from the store, name the ones that
did not, raise the `broken` flag, and compare through the store from then on.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

PREFIX = "gpu-doctor-canary"
POLL_S = 0.005
KEEP_STEPS = 64          # store keys older than this many checks are deleted


class Exchange:
    """All-gather of small int64 payloads among the ranks, bounded by `timeout_s`."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.store: Any = dist.PrefixStore(PREFIX, dist.distributed_c10d._get_default_store())
        self.group: Any = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s))
        self.broken = ""         # why the gloo group is no longer used ("" while it is)
        self.last: tuple[str, list[int]] | None = None   # the latest exchange through the store

    def gather(self, tag: str, values: list[int]) -> tuple[dict[int, list[int]], str]:
        """{rank: its values} for the ranks that came within the timeout, and how it was done."""
        deadline = time.monotonic() + self.timeout_s
        key = f"{tag}/{self.rank}"
        self.store.set(key, ",".join(map(str, values)))
        if not self.broken and self.store.check(["broken"]):
            self.broken = self.store.get("broken").decode(errors="replace")
        if not self.broken:
            try:
                return self._all_gather(values), "all_gather"
            except Exception as exc:   # timeout, a rank gone: the group is unusable now
                self.broken = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
                self.store.set("broken", f"rank {self.rank}: {self.broken}")
        return self._from_store(tag, deadline), "store"

    def _all_gather(self, values: list[int]) -> dict[int, list[int]]:
        mine = torch.tensor(values, dtype=torch.int64)
        out = [torch.empty_like(mine) for _ in range(self.world)]
        dist.all_gather(out, mine, group=self.group)
        return {r: t.tolist() for r, t in enumerate(out)}

    def _from_store(self, tag: str, deadline: float) -> dict[int, list[int]]:
        found: dict[int, list[int]] = {}
        while True:
            for r in range(self.world):
                if r not in found and self.store.check([f"{tag}/{r}"]):
                    text = self.store.get(f"{tag}/{r}").decode()
                    found[r] = [int(v) for v in text.split(",") if v]
            if len(found) == self.world or time.monotonic() >= deadline:
                self.store.set(f"{tag}/read/{self.rank}", "1")
                self.last = (tag, sorted(found))
                return found
            time.sleep(POLL_S)

    def settle(self, timeout_s: float) -> None:
        """Before this rank leaves: wait (bounded) until the ranks of the latest store exchange
        have read it. The store lives in one rank's process (rank 0's, with env://); were it
        to leave first, the others would lose the digests they are still reading."""
        if self.last is None:
            return
        tag, ranks = self.last
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                if all(self.store.check([f"{tag}/read/{r}"]) for r in ranks):
                    return
                time.sleep(POLL_S)
        except Exception:   # the store is gone already: nothing left to protect
            pass

    def forget(self, tag: str) -> None:
        """Delete this rank's key of an old check (the store stays small on long runs)."""
        try:
            self.store.delete_key(f"{tag}/{self.rank}")
        except Exception:
            pass
