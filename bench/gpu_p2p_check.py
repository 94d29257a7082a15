"""The real peer-copy integrity test (P2P002) on the GPUs of this machine. GPU only.

    python bench/gpu_p2p_check.py [--size 256M] [--iterations 3] [--backend auto|torch|cudart]
                                  [--inject 0-1] [--loopback] [--json FILE]

Prints the NVML matrix (P2P001, from a subprocess), then copies a patterned
buffer between every ordered GPU pair and back with peer access, compares
each copy bit for bit with a host-staged copy, and prints the bandwidth per
direction and every mismatch (bad elements, first offsets, flipped bits).

  --inject S-D   after each real S->D copy, flip one bit on the destination GPU:
                 proves on real hardware that the test reports exactly that pair
  --loopback     also copy each GPU to itself (device-to-device on one GPU), so a
                 one-GPU machine still exercises the CUDA path end to end

Exit codes: 0 every tested direction bit-exact (or skipped: no CUDA / fewer than
two GPUs, with the reason on stdout), 1 corruption or a failed copy, 2 bad usage.
Unlike p2pBandwidthLatencyTest, this checks the bytes; nvbandwidth and
nccl-tests with `-c 1` are the closest hardware-side equivalents.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from doctor.probes.p2p import NVML_CHILD, pair_view, parse_size, render_integrity, render_matrix  # noqa: E402
from doctor.probes.p2p_child import ELEMENT_BYTES, PeerVerifier, directions, open_backend  # noqa: E402


def nvml_matrix() -> str:
    proc = subprocess.run([sys.executable, "-I", str(NVML_CHILD)], capture_output=True, text=True, timeout=60)
    try:
        value = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return f"no NVML matrix: the probe exited with {proc.returncode}: {proc.stderr.strip()[-200:]}"
    value["views"] = [pair_view(p) for p in value.get("pairs", [])]
    return render_matrix(value)


class Injecting:
    """Wraps a backend: after a real copy src->dst of the chosen pair, flip one bit on dst."""

    def __init__(self, backend: Any, pair: tuple[int, int]):
        self.backend, self.pair = backend, pair

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)

    def copy(self, src: int, dst: int, buf: Any) -> Any:
        out = self.backend.copy(src, dst, buf)
        if (src, dst) == self.pair:
            out[out.numel() // 3] ^= 1 << 17  # on the GPU: a torch tensor
        return out


def parse_pair(text: str) -> tuple[int, int]:
    try:
        a, b = (int(x) for x in text.split("-"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a GPU pair: {text!r} (use e.g. 0-1)") from None
    return a, b


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", type=parse_size, default=256 << 20, help="bytes per copy (default 256M)")
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--backend", choices=("auto", "torch", "cudart"), default="auto")
    p.add_argument("--inject", type=parse_pair, metavar="S-D", help="flip a bit after each S->D copy")
    p.add_argument("--loopback", action="store_true", help="also copy each GPU to itself")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    args = p.parse_args(argv)

    try:
        backend = open_backend(args.backend)
        devices = backend.devices()
    except Exception as exc:
        print(f"skipped: no CUDA here ({exc})")
        return 0
    if args.inject:
        if backend.name != "torch":
            print("gpu_p2p_check: error: --inject needs the torch backend", file=sys.stderr)
            return 2
        backend = Injecting(backend, args.inject)
    names = ", ".join(sorted({d["name"] for d in devices if d.get("name")})) or "unnamed"
    print(f"gpu-doctor P2P check on {socket.gethostname()}: {len(devices)} GPU(s) ({names}), "
          f"backend {backend.name}, {args.size >> 20} MiB x{args.iterations} per direction")
    print("\nNVML peer-to-peer matrix (P2P001):\n" + nvml_matrix())
    if len(devices) < 2 and not args.loopback:
        print("\nskipped: fewer than two GPUs, no peer pairs (use --loopback to exercise one GPU)")
        return 0

    verifier = PeerVerifier(backend.copy, stage=backend.stage, fetch=backend.fetch,
                            peer_access=backend.peer_access, pattern=backend.pattern,
                            elements=args.size // ELEMENT_BYTES, iterations=args.iterations)
    events: list[dict[str, Any]] = []

    def progress(event: dict[str, Any]) -> None:
        events.append(event)
        if event["event"] == "pair":
            print(f"  GPU{event['src']}->GPU{event['dst']}: {event['status']}", file=sys.stderr, flush=True)

    t0 = time.monotonic()
    ids = [d["index"] for d in devices]
    verifier.run(ids, progress)
    tests = [e for e in events if e["event"] == "pair"]
    if args.loopback:
        loop = PeerVerifier(backend.copy, stage=backend.stage, fetch=backend.fetch, peer_access=lambda s, d: True,
                            pattern=backend.pattern, elements=args.size // ELEMENT_BYTES, iterations=args.iterations)
        tests += [loop.check_pair(i, i).to_json() for i in ids]
    result = list(directions(tests).values())
    seconds = time.monotonic() - t0
    value = {"devices": devices, "directions": [d for d in result if d["src"] != d["dst"]]}
    print(f"\nPeer-copy integrity (P2P002), {seconds:.1f} s:\n" + render_integrity(value))
    for d in result:
        if d["src"] == d["dst"]:
            print(f"  loopback GPU{d['src']}: {d['status']}, {d['gbps'] or 0:.1f} GB/s")
    bad = [d for d in result if d["status"] in ("corrupt", "error")]
    for d in bad:
        print(f"\nGPU{d['src']}->GPU{d['dst']}: {d['status']}: {d['bad_elements']} of {args.size // ELEMENT_BYTES} "
              f"elements differ in {d['bad_copies']} of {d['copies']} copies {d['error'] or ''}")
        for b in d["first_bad"]:
            print(f"    byte {b['byte']:#x}: expected {b['expected']}, got {b['got']} "
                  f"({b['flipped_bits']} bits flipped)")
    if args.json:
        Path(args.json).write_text(json.dumps({"devices": devices, "directions": result, "seconds": seconds,
                                               "bytes": args.size, "backend": backend.name}, indent=2))
    verdict = (f"CORRUPTION or copy errors on {len(bad)} direction(s)" if bad
               else f"OK: {sum(d['status'] == 'ok' for d in result)} direction(s) bit-exact")
    print(f"\n{verdict}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
