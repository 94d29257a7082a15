"""The canary on one rank: count optimizer steps, digest every K, compare off the training thread.

The optimizer step post-hook (torch's global one) does only what must happen on the training
thread: the digest, on the parameters' device, queued for the canary thread. The canary
thread compares (exchange.py), and writes this rank's record, `canary/rank_N.json` in the run
folder, after every check; the first rank of a comparison prints the alarm line the launcher
shows (`gpu-doctor canary: step 140: rank 2's `layer3.weight` differs from ranks 0, 1, 3`).
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import socket
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from .compare import disagreements, missed_line
from .digest import digests
from .exchange import KEEP_STEPS, Exchange

MARK = "gpu-doctor canary: "
MAX_EVENTS = 50


def say(text: str) -> None:
    print(MARK + text, file=sys.stderr, flush=True)


@dataclass
class Check:
    step: int
    digest: Any            # 0-dim int64 tensor (on the host, or pinned and being copied there)
    per_tensor: Any        # int64 vector on the parameters' device
    done: Any              # a CUDA event when the copy is asynchronous, else None
    timing: Any            # (start, end) CUDA events, or the digest's wall seconds on the host


class Canary:
    def __init__(self, k: int, folder: str, timeout_s: float, optimizer_state: bool = False):
        self.k = k
        self.optimizer_state = optimizer_state
        self.folder = folder
        self.timeout_s = timeout_s
        self.modules: list[weakref.ref[Any]] = []
        self.optimizer: weakref.ref[Any] | None = None
        self.named: list[tuple[str, torch.Tensor]] = []
        self.exchange: Exchange | None = None
        self.steps = 0
        self.last_step_at: float | None = None
        self.queue: queue.SimpleQueue[Check | None] = queue.SimpleQueue()
        self.pending = 0
        self.idle = threading.Condition()
        self.closed = False
        self.thread: threading.Thread | None = None
        self.record: dict[str, Any] = {
            "rank": None, "world_size": None, "k": k, "pid": os.getpid(),
            "host": os.environ.get("SLURMD_NODENAME") or socket.gethostname(),   # Slurm's name for the node
            "device": "", "tensors": 0, "steps": 0, "checks": 0, "agreed": 0, "last_check_step": None,
            "how": "", "cost": {"digest_ms_total": 0.0, "digest_ms_max": 0.0, "hook_ms_total": 0.0,
                                "exchange_ms_total": 0.0, "exchange_ms_max": 0.0,
                                "step_ms_total": 0.0, "step_samples": 0},
            "mismatches": [], "missed": [], "problems": []}

    # ---- the training thread ------------------------------------------------------------

    def ddp_built(self, ddp: Any) -> None:
        """After DistributedDataParallel's constructor: every rank is here, so the canary's
        gloo group is made now (new_group needs every rank, in the same order)."""
        group = getattr(ddp, "process_group", None)
        if group is not None and dist.get_world_size(group) != dist.get_world_size():
            # Replicas of a data-parallel subgroup (hybrid parallelism) are equal within it only.
            self.problem(f"DistributedDataParallel over {dist.get_world_size(group)} of "
                         f"{dist.get_world_size()} ranks: not compared (the canary compares whole-world DDP)")
            self.closed = True
            return
        self.modules.append(weakref.ref(ddp))
        self.named = []
        if self.exchange is None and not self.closed:
            try:
                self.exchange = Exchange(self.timeout_s)
                self.record.update(rank=self.exchange.rank, world_size=self.exchange.world)
            except Exception as exc:
                self.problem(f"no canary group: {type(exc).__name__}: {exc}")
                self.closed = True

    def after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """torch.optim's global step post-hook."""
        now = time.perf_counter()
        if self.closed or self.exchange is None:
            return
        if self.optimizer is None:
            if not self._steps_ddp_parameters(optimizer):
                return
            self.optimizer = weakref.ref(optimizer)
            self.named = []    # listed again at the first check: with the optimizer's state, if asked
        elif self.optimizer() is not optimizer:
            return
        self.steps += 1
        cost = self.record["cost"]
        if self.last_step_at is not None:
            cost["step_ms_total"] += (now - self.last_step_at) * 1e3
            cost["step_samples"] += 1
        self.last_step_at = now
        if self.steps % self.k == 0:
            self._check()
            cost["hook_ms_total"] += (time.perf_counter() - now) * 1e3

    def _steps_ddp_parameters(self, optimizer: Any) -> bool:
        ids = {id(p) for _, p in self.parameters()}
        return any(id(p) in ids for group in optimizer.param_groups for p in group["params"])

    def parameters(self) -> list[tuple[str, torch.Tensor]]:
        """The DDP models' parameters, in name order (the same on every rank)."""
        if not self.named:
            alive = [m for m in (ref() for ref in self.modules) if m is not None]
            for i, ddp in enumerate(alive):
                prefix = f"{i}:" if len(alive) > 1 else ""
                self.named += [(prefix + name, p) for name, p in ddp.module.named_parameters()]
            optimizer = self.optimizer() if self.optimizer is not None else None
            if self.optimizer_state and optimizer is not None:
                self.named += self._optimizer_state(optimizer.state)
            self.record["tensors"] = len(self.named)
            if self.named:
                self.record["device"] = str(self.named[0][1].device)
        return self.named

    def _optimizer_state(self, state: Any) -> list[tuple[str, torch.Tensor]]:
        """The optimizer's per-parameter tensors (Adam's exp_avg, exp_avg_sq...), which DDP's
        identical gradients keep identical too; named after their parameter."""
        out = []
        for name, p in list(self.named):
            for key, value in sorted(state.get(p, {}).items()):
                if isinstance(value, torch.Tensor):
                    out.append((f"{name} (optimizer {key})", value))
        return out

    def _check(self) -> None:
        tensors = [p for _, p in self.parameters()]
        with torch.no_grad():
            if tensors and tensors[0].is_cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                total, per = digests(tensors)
                end.record()
                host = torch.empty((), dtype=torch.int64, pin_memory=True)
                host.copy_(total, non_blocking=True)
                done = torch.cuda.Event()
                done.record()
                item = Check(self.steps, host, per, done, (start, end))
            else:
                t0 = time.perf_counter()
                total, per = digests(tensors)
                item = Check(self.steps, total, per, None, time.perf_counter() - t0)
        with self.idle:
            self.pending += 1
        self._thread().put(item)

    def _thread(self) -> queue.SimpleQueue[Check | None]:
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="gpu-doctor-canary", daemon=True)
            self.thread.start()
        return self.queue

    def drain(self, timeout_s: float) -> None:
        """Let the queued checks finish (bounded), then stop using the group."""
        deadline = time.monotonic() + timeout_s
        with self.idle:
            while self.pending and time.monotonic() < deadline:
                self.idle.wait(max(0.0, deadline - time.monotonic()))
        if self.exchange is not None and not self.closed:
            self.exchange.settle(self.timeout_s)
        self.closed = True
        self.queue.put(None)

    # ---- the canary thread --------------------------------------------------------------

    def _run(self) -> None:
        sys.setprofile(None)   # the canary's own calls are not the job's: keep them out of
        sys.settrace(None)     # a Python instrumenter's trace (Score-P) where it allows
        while True:
            item = self.queue.get()
            if item is None:
                return
            try:
                if not self.closed:
                    self._compare(item)
            except Exception as exc:
                self.problem(f"check at step {item.step}: {type(exc).__name__}: {exc}")
            finally:
                self.write()       # before the drain may return: the process may end right after
                with self.idle:
                    self.pending -= 1
                    self.idle.notify_all()

    def _compare(self, item: Check) -> None:
        assert self.exchange is not None
        cost = self.record["cost"]
        if item.done is not None:
            item.done.synchronize()
            start, end = item.timing
            digest_ms = start.elapsed_time(end)
        else:
            digest_ms = item.timing * 1e3
        cost["digest_ms_total"] += digest_ms
        cost["digest_ms_max"] = max(cost["digest_ms_max"], digest_ms)
        t0 = time.perf_counter()
        got, how = self.exchange.gather(f"d/{item.step}", [int(item.digest)])
        self.record["how"] = how
        rank, world = self.exchange.rank, self.exchange.world
        missing = [r for r in range(world) if r not in got]
        if missing:
            self.event("missed", {"step": item.step, "ranks": missing,
                                  "line": missed_line(item.step, missing, self.timeout_s)}, rank, got)
        values = {r: v[0] for r, v in got.items()}
        if len(set(values.values())) > 1:
            self._name_tensor(item, values)
        else:
            self.record["agreed"] += 1
        self.record["checks"] += 1
        self.record["last_check_step"] = item.step
        exchange_ms = (time.perf_counter() - t0) * 1e3
        cost["exchange_ms_total"] += exchange_ms
        cost["exchange_ms_max"] = max(cost["exchange_ms_max"], exchange_ms)
        if item.step > KEEP_STEPS * self.k:
            self.exchange.forget(f"d/{item.step - KEEP_STEPS * self.k}")
            self.exchange.forget(f"t/{item.step - KEEP_STEPS * self.k}")

    def _name_tensor(self, item: Check, values: dict[int, int]) -> None:
        """Round two: the per-tensor digests name the first tensor each minority rank has wrong."""
        assert self.exchange is not None
        vectors, _ = self.exchange.gather(f"t/{item.step}", item.per_tensor.cpu().tolist())
        for doc in disagreements(item.step, values, vectors, [name for name, _ in self.named]):
            self.event("mismatches", doc, self.exchange.rank, values)

    def event(self, kind: str, doc: dict[str, Any], rank: int, present: Any) -> None:
        events = self.record[kind]
        first_of_step = not events or events[-1]["step"] != doc["step"] or events[-1]["line"] != doc["line"]
        if len(events) < MAX_EVENTS and first_of_step:
            events.append(doc)
        if rank == min(present, default=rank) and (kind != "mismatches" or len(self.record[kind]) <= 3):
            say(doc["line"])

    def problem(self, text: str) -> None:
        if len(self.record["problems"]) < MAX_EVENTS:
            self.record["problems"].append(text)
        say(f"problem: {text}")
        self.write()

    def write(self) -> None:
        self.record["steps"] = self.steps
        rank = self.record["rank"] if self.record["rank"] is not None else os.environ.get("RANK", "x")
        folder = os.path.join(self.folder, "canary")
        try:
            os.makedirs(folder, exist_ok=True)
            path = os.path.join(folder, f"rank_{rank}.json")
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump(self.record, f)
            os.replace(tmp, path)
        except OSError:
            pass


_CANARY: Canary | None = None


def start() -> None:
    """Register the canary (after `import torch`); idempotent."""
    global _CANARY
    if _CANARY is not None:
        return
    k = int(os.environ.get("GPU_DOCTOR_CANARY", "0") or 0)
    if k <= 0:
        return
    canary = _CANARY = Canary(k, os.environ.get("GPU_DOCTOR_CANARY_DIR", "."),
                              float(os.environ.get("GPU_DOCTOR_CANARY_TIMEOUT", "60")),
                              os.environ.get("GPU_DOCTOR_CANARY_OPTIMIZER") == "1")
    from torch.nn.parallel import DistributedDataParallel as ddp_class
    from torch.optim.optimizer import register_optimizer_step_post_hook

    register_optimizer_step_post_hook(canary.after_step)
    ddp_init = ddp_class.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        ddp_init(self, *args, **kwargs)
        canary.ddp_built(self)

    ddp_class.__init__ = init  # type: ignore[method-assign]
    destroy = dist.destroy_process_group

    def destroy_process_group(*args: Any, **kwargs: Any) -> Any:
        canary.drain(canary.timeout_s + 1.0)
        return destroy(*args, **kwargs)

    dist.destroy_process_group = destroy_process_group
    dist.distributed_c10d.destroy_process_group = destroy_process_group  # type: ignore[assignment]
    atexit.register(canary.drain, canary.timeout_s + 1.0)
