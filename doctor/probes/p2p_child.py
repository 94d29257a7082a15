"""The active P2P data-integrity test (P2P002), run in the job's own interpreter.

This file is executed by path (`<job python> p2p_child.py --bytes N ...`) in a
subprocess, so it imports only the standard library at the top and torch
inside functions: the job's interpreter need not have gpu-doctor installed.

For every ordered GPU pair (s, d) with peer access it stages a patterned buffer
on s through the host (the trusted path), copies it s -> d with a peer copy,
reads what arrived back through the host, copies it d -> s again, and compares
both with the host-staged data bit for bit. Mismatches are attributed to the
direction whose copy produced them. It prints one JSON line per event
(`devices`, `begin`, `pair`, `budget`, `done`, `error`), flushed at once, so a
parent that kills a hung child still knows which pair was in progress.

Command line equivalent of the hardware side: `nvbandwidth` or nccl-tests with
`-c 1`; `p2pBandwidthLatencyTest` measures speed but never checks the bytes.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

ELEMENT_BYTES = 8  # the pattern is int64, so every bit of every byte is compared
Copy = Callable[[int, int, Any], Any]


def tensor_pattern(elements: int, seed: int) -> Any:
    """An index- and seed-dependent int64 hash pattern as a host tensor (never zeros or a constant)."""
    import torch

    x = (torch.arange(elements, dtype=torch.int64) + seed * 0x632BE5AB) * 0x5851F42D4C957F2D
    return x ^ (x >> 29)


def bytes_pattern(elements: int, seed: int) -> bytes:
    """The same idea without torch: a seeded SHAKE-256 stream, different at every offset."""
    return hashlib.shake_256(f"gpu-doctor-p2p-{seed}".encode()).digest(elements * ELEMENT_BYTES)


def _bad(index: int, want: int, have: int) -> dict[str, Any]:
    want, have = want & 0xFFFFFFFFFFFFFFFF, have & 0xFFFFFFFFFFFFFFFF
    return {"index": index, "byte": index * ELEMENT_BYTES, "expected": f"{want:#018x}",
            "got": f"{have:#018x}", "flipped_bits": bin(want ^ have).count("1")}


def mismatches(expected: Any, got: Any, limit: int) -> tuple[int, list[dict[str, Any]]]:
    """How many 8-byte elements differ, and the first `limit` of them with both values."""
    if isinstance(expected, (bytes, bytearray)):
        return _bytes_mismatches(bytes(expected), bytes(got), limit)
    bad = expected != got
    count = int(bad.sum())
    first = [_bad(i, int(expected[i]), int(got[i])) for i in bad.nonzero().flatten()[:limit].tolist()]
    return count, first


def _bytes_mismatches(a: bytes, b: bytes, limit: int) -> tuple[int, list[dict[str, Any]]]:
    if a == b:
        return 0, []
    count, chunk = 0, 1 << 16
    first: list[dict[str, Any]] = []
    for off in range(0, len(a), chunk):
        if a[off:off + chunk] == b[off:off + chunk]:
            continue
        for e in range(off, min(off + chunk, len(a)), ELEMENT_BYTES):
            if a[e:e + ELEMENT_BYTES] != b[e:e + ELEMENT_BYTES]:
                count += 1
                if len(first) < limit:
                    first.append(_bad(e // ELEMENT_BYTES, int.from_bytes(a[e:e + ELEMENT_BYTES], "little"),
                                      int.from_bytes(b[e:e + ELEMENT_BYTES], "little")))
    return count, first


def _clone(buf: Any) -> Any:
    return bytes(buf) if isinstance(buf, (bytes, bytearray)) else buf.clone()


@dataclass
class Observation:
    """One direction's copies within one pair test: the most bad elements in one copy,
    how many copies had any, the first bad offsets, and the best speed."""

    bad_elements: int = 0
    bad_copies: int = 0
    copies: int = 0
    first_bad: list[dict[str, Any]] = field(default_factory=list)
    gbps: float | None = None
    error: str | None = None


@dataclass
class PairTest:
    """The test of ordered pair (src, dst): `forward` is src->dst, `back` is dst->src."""

    src: int
    dst: int
    status: str  # ok | corrupt | no_peer_access | error
    forward: Observation | None = None
    back: Observation | None = None
    bytes: int = 0
    iterations: int = 0
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class PeerVerifier:
    """Checks peer copies against host-staged copies; device-agnostic and pure.

    `copy(src, dst, buffer)` is the peer copy under test and must return only
    when the data is there. `stage(host_buffer, dev)` and `fetch(buffer)` are
    the trusted host paths; `peer_access(src, dst)` makes sure peer access is
    on and says whether it is (a pair without it is reported, never tested
    through the host). `pattern(elements, seed)` makes the host buffer: a
    torch tensor (the default) or bytes.
    """

    def __init__(self, copy: Copy, *, stage: Callable[[Any, int], Any] | None = None,
                 fetch: Callable[[Any], Any] | None = None,
                 peer_access: Callable[[int, int], bool] | None = None,
                 pattern: Callable[[int, int], Any] = tensor_pattern,
                 elements: int = 1 << 22, iterations: int = 2, max_offsets: int = 8,
                 clock: Callable[[], float] = time.perf_counter):
        self.copy = copy
        self.stage = stage or (lambda buf, dev: _clone(buf))
        self.fetch = fetch or _clone
        self.peer_access = peer_access or (lambda src, dst: True)
        self.pattern = pattern
        self.elements = elements
        self.iterations = max(1, iterations)
        self.max_offsets = max_offsets
        self.clock = clock

    def _timed_copy(self, src: int, dst: int, buf: Any) -> tuple[Any, float]:
        t0 = self.clock()
        out = self.copy(src, dst, buf)
        return out, self.clock() - t0

    def _record(self, obs: Observation, expected: Any, got: Any, seconds: float) -> None:
        count, first = mismatches(expected, got, self.max_offsets)
        if count and not obs.first_bad:
            obs.first_bad = first
        obs.bad_elements = max(obs.bad_elements, count)
        obs.bad_copies += bool(count)
        obs.copies += 1
        if seconds > 0:
            gbps = self.elements * ELEMENT_BYTES / seconds / 1e9
            obs.gbps = max(obs.gbps or 0.0, gbps)

    def check_pair(self, src: int, dst: int) -> PairTest:
        test = PairTest(src, dst, "ok", bytes=self.elements * ELEMENT_BYTES, iterations=self.iterations)
        try:
            access, back_ok = self.peer_access(src, dst), self.peer_access(dst, src)
        except Exception as exc:
            test.status, test.error = "error", f"{type(exc).__name__}: {exc}"
            return test
        if not access:
            test.status = "no_peer_access"
            return test
        test.forward = Observation()
        test.back = Observation() if back_ok else None
        try:
            for it in range(self.iterations):
                host = self.pattern(self.elements, (src * 1009 + dst) * 31 + it)
                there = self._leg(test.forward, src, dst, self.stage(host, src), host)
                if there is None:
                    break
                if test.back is not None and test.back.error is None:
                    # Checked against what arrived on dst, so a forward error is not counted twice.
                    self._leg(test.back, dst, src, *there)
        except Exception as exc:  # the host path failed: neither direction was measured
            test.status, test.error = "error", f"{type(exc).__name__}: {exc}"
            return test
        if test.forward.bad_elements or (test.back is not None and test.back.bad_elements):
            test.status = "corrupt"
        elif test.forward.error:
            test.status, test.error = "error", test.forward.error
        return test

    def _leg(self, obs: Observation, src: int, dst: int, buf: Any, expected: Any) -> tuple[Any, Any] | None:
        """One peer copy src -> dst, checked; (device buffer, its host view), or None if it failed."""
        try:
            out, seconds = self._timed_copy(src, dst, buf)
            got = self.fetch(out)
        except Exception as exc:  # a CUDA error in one copy must not hide the other pairs
            obs.error = f"{type(exc).__name__}: {exc}"
            return None
        self._record(obs, expected, got, seconds)
        return out, got

    def run(self, devices: Iterable[int], emit: Callable[[dict[str, Any]], None],
            deadline: float | None = None) -> list[PairTest]:
        """Test every ordered pair, emitting `begin` and `pair` events; stop at the deadline."""
        ids = list(devices)
        pairs = [(s, d) for s in ids for d in ids if s != d]
        done: list[PairTest] = []
        for n, (src, dst) in enumerate(pairs):
            if deadline is not None and time.monotonic() >= deadline:
                emit({"event": "budget", "untested": [list(p) for p in pairs[n:]]})
                break
            emit({"event": "begin", "src": src, "dst": dst})
            test = self.check_pair(src, dst)
            done.append(test)
            emit({"event": "pair", **test.to_json()})
        return done


def directions(tests: Iterable[dict[str, Any]]) -> dict[tuple[int, int], dict[str, Any]]:
    """Merge pair tests into one verdict per direction (src -> dst).

    A test of (s, d) observes direction s->d (forward) and d->s (back), so each
    direction is seen twice; corruption is blamed on the copy that made it.
    """
    out: dict[tuple[int, int], dict[str, Any]] = {}

    def entry(src: int, dst: int) -> dict[str, Any]:
        return out.setdefault((src, dst), {"src": src, "dst": dst, "status": "ok", "bad_elements": 0,
                                           "bad_copies": 0, "copies": 0, "first_bad": [], "gbps": None,
                                           "error": None})

    for t in tests:
        src, dst = t["src"], t["dst"]
        own = entry(src, dst)
        if t["status"] in ("no_peer_access", "error"):
            own["status"], own["error"] = t["status"], t.get("error")
            continue
        for (a, b), obs in (((src, dst), t.get("forward")), ((dst, src), t.get("back"))):
            if not obs:
                continue
            e = entry(a, b)
            e["error"] = e["error"] or obs.get("error")
            e["bad_elements"] = max(e["bad_elements"], obs["bad_elements"])
            e["bad_copies"] += obs["bad_copies"]
            e["copies"] += obs["copies"]
            if obs["bad_elements"] and not e["first_bad"]:
                e["first_bad"] = obs["first_bad"]
            if obs["gbps"] is not None:
                e["gbps"] = max(e["gbps"] or 0.0, obs["gbps"])
    for e in out.values():
        if e["bad_elements"]:
            e["status"] = "corrupt"
        elif e["error"] and e["status"] == "ok":
            e["status"] = "error"
    return dict(sorted(out.items()))


class TorchCuda:
    """The job's own path: torch tensors on `cuda:N`. ATen turns peer access on
    (cudaDeviceEnablePeerAccess) at the first copy between two GPUs that can."""

    name = "torch"
    pattern = staticmethod(tensor_pattern)

    def __init__(self) -> None:
        import torch

        self.torch = torch
        if not torch.cuda.is_available():
            raise RuntimeError(f"torch {torch.__version__} cannot use CUDA "
                               f"(built for CUDA {torch.version.cuda})")

    def devices(self) -> list[dict[str, Any]]:
        out = []
        for i in range(self.torch.cuda.device_count()):
            p = self.torch.cuda.get_device_properties(i)
            bus = getattr(p, "pci_bus_id", None)
            pci = (f"{getattr(p, 'pci_domain_id', 0):08X}:{bus:02X}:{getattr(p, 'pci_device_id', 0):02X}.0"
                   if bus is not None else None)
            out.append({"index": i, "name": p.name, "pci_bus_id": pci})
        return out

    def peer_access(self, src: int, dst: int) -> bool:
        return bool(self.torch.cuda.can_device_access_peer(src, dst))

    def stage(self, buf: Any, dev: int) -> Any:
        out = buf.to(f"cuda:{dev}")
        self.torch.cuda.synchronize(dev)
        return out

    def fetch(self, buf: Any) -> Any:
        return buf.cpu()

    def copy(self, src: int, dst: int, buf: Any) -> Any:
        out = buf.to(f"cuda:{dst}")  # a peer copy once ATen has enabled peer access
        self.torch.cuda.synchronize(src)
        self.torch.cuda.synchronize(dst)
        return out


class DeviceBuffer:
    """Device memory from cudaMalloc, freed when dropped."""

    def __init__(self, rt: CudaRuntime, ptr: ctypes.c_void_p, device: int, size: int):
        self.rt, self.ptr, self.device, self.size = rt, ptr, device, size

    def __del__(self) -> None:
        self.rt.lib.cudaFree(self.ptr)


class CudaRuntime:
    """Without torch: the CUDA runtime API through ctypes (libcudart on the loader path)."""

    name = "cudart"
    pattern = staticmethod(bytes_pattern)
    LIBRARIES = ("libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so")
    H2D, D2H = 1, 2

    def __init__(self) -> None:
        errors = []
        for name in self.LIBRARIES:
            try:
                self.lib = ctypes.CDLL(name)
                break
            except OSError as exc:
                errors.append(str(exc))
        else:
            raise RuntimeError(f"no CUDA runtime library ({'; '.join(errors[-1:])})")
        self.lib.cudaGetErrorString.restype = ctypes.c_char_p
        self.count = ctypes.c_int()
        self.call("cudaGetDeviceCount", ctypes.byref(self.count))
        self.enabled: set[tuple[int, int]] = set()

    def call(self, fn: str, *args: Any, ok: tuple[int, ...] = (0,)) -> int:
        rc = int(getattr(self.lib, fn)(*args))
        if rc not in ok:
            raise RuntimeError(f"{fn}: error {rc} ({self.lib.cudaGetErrorString(rc).decode()})")
        return rc

    def devices(self) -> list[dict[str, Any]]:
        out = []
        for i in range(self.count.value):
            bus = ctypes.create_string_buffer(32)
            try:
                pci = bus.value.decode() if self.lib.cudaDeviceGetPCIBusId(bus, 32, i) == 0 else None
            except AttributeError:
                pci = None
            out.append({"index": i, "name": None, "pci_bus_id": pci})
        return out

    def peer_access(self, src: int, dst: int) -> bool:
        """cudaDeviceCanAccessPeer, then cudaDeviceEnablePeerAccess from src's context."""
        can = ctypes.c_int()
        self.call("cudaDeviceCanAccessPeer", ctypes.byref(can), src, dst)
        if not can.value:
            return False
        if (src, dst) not in self.enabled:
            self.call("cudaSetDevice", src)
            self.call("cudaDeviceEnablePeerAccess", dst, 0, ok=(0, 704))  # 704: already enabled
            self.enabled.add((src, dst))
        return True

    def _alloc(self, dev: int, size: int) -> DeviceBuffer:
        self.call("cudaSetDevice", dev)
        ptr = ctypes.c_void_p()
        self.call("cudaMalloc", ctypes.byref(ptr), ctypes.c_size_t(size))
        return DeviceBuffer(self, ptr, dev, size)

    def stage(self, buf: bytes, dev: int) -> DeviceBuffer:
        out = self._alloc(dev, len(buf))
        self.call("cudaMemcpy", out.ptr, ctypes.c_char_p(buf), ctypes.c_size_t(len(buf)), self.H2D)
        return out

    def fetch(self, buf: DeviceBuffer) -> bytes:
        host = ctypes.create_string_buffer(buf.size)
        self.call("cudaSetDevice", buf.device)
        self.call("cudaMemcpy", host, buf.ptr, ctypes.c_size_t(buf.size), self.D2H)
        return host.raw

    def copy(self, src: int, dst: int, buf: DeviceBuffer) -> DeviceBuffer:
        out = self._alloc(dst, buf.size)
        self.call("cudaMemcpyPeer", out.ptr, dst, buf.ptr, src, ctypes.c_size_t(buf.size))
        self.call("cudaDeviceSynchronize")
        self.call("cudaSetDevice", src)
        self.call("cudaDeviceSynchronize")
        return out


def open_backend(choice: str) -> Any:
    """torch when it can use CUDA (the job's own path), else the CUDA runtime via ctypes."""
    if choice == "torch":
        return TorchCuda()
    if choice == "cudart":
        return CudaRuntime()
    try:
        return TorchCuda()
    except Exception as torch_exc:
        try:
            return CudaRuntime()
        except Exception as rt_exc:
            raise RuntimeError(f"torch: {torch_exc}; CUDA runtime: {rt_exc}") from None


def emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="gpu-doctor P2P002: peer-copy data integrity per GPU pair")
    p.add_argument("--bytes", type=int, default=32 << 20, help="buffer size per pair (default 32 MiB)")
    p.add_argument("--iterations", type=int, default=2, help="copies per pair and direction")
    p.add_argument("--budget", type=float, default=None, help="seconds; no new pair starts after it")
    p.add_argument("--max-offsets", type=int, default=8, help="bad offsets to report per direction")
    p.add_argument("--backend", choices=("auto", "torch", "cudart"), default="auto",
                   help="torch tensors (the job's path) or the CUDA runtime via ctypes (default: auto)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None, backend: Any = None) -> int:
    """Run the test and stream JSON lines; exit 0 when it ran (whatever it found), 3 when it could not."""
    args = parse_args(argv)
    start = time.monotonic()
    deadline = start + args.budget if args.budget is not None else None
    try:
        backend = backend or open_backend(args.backend)
        devices = backend.devices()
    except Exception as exc:
        emit({"event": "error", "error": str(exc)})
        return 3
    emit({"event": "devices", "devices": devices, "backend": backend.name, "bytes": args.bytes,
          "iterations": args.iterations})
    verifier = PeerVerifier(backend.copy, stage=backend.stage, fetch=backend.fetch,
                            peer_access=backend.peer_access, pattern=backend.pattern,
                            elements=max(1, args.bytes // ELEMENT_BYTES),
                            iterations=args.iterations, max_offsets=args.max_offsets)
    if len(devices) >= 2:
        verifier.run([d["index"] for d in devices], emit, deadline)
    emit({"event": "done", "seconds": round(time.monotonic() - start, 3)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
