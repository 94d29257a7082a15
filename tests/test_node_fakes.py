"""The fake NVIDIA libraries keep the promises other tests rely on (tests/fakes/node.py)."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap

import pytest
from fakes.node import attempts, real_driver_present

PROBE = textwrap.dedent("""
    import ctypes
    rt = ctypes.CDLL("libcudart.so.12")
    out = {}
    n = ctypes.c_int()
    out["first"] = rt.cudaGetDeviceCount(ctypes.byref(n))
    out["second"] = rt.cudaGetDeviceCount(ctypes.byref(n))  # a failed init sticks in its process
    if out["first"] == 0:
        def roundtrip(src, dst):
            data = bytes(range(256)) * 4
            a, b = ctypes.c_void_p(), ctypes.c_void_p()
            rt.cudaSetDevice(src); rt.cudaMalloc(ctypes.byref(a), len(data))
            rt.cudaSetDevice(dst); rt.cudaMalloc(ctypes.byref(b), len(data))
            host = ctypes.create_string_buffer(data, len(data))
            rt.cudaMemcpy(a, host, len(data), 1)
            rt.cudaMemcpyPeer(b, dst, a, src, len(data))
            back = ctypes.create_string_buffer(len(data))
            rt.cudaMemcpy(back, b, len(data), 2)
            return back.raw == data
        out["copies"] = {f"{s}-{d}": roundtrip(s, d) for s, d in [(0, 1), (2, 3), (3, 2)]}
        can = ctypes.c_int()
        rt.cudaDeviceCanAccessPeer(ctypes.byref(can), 0, 1)
        out["can_0_1"] = can.value
    print(repr(out))
""")


def probe(env: dict[str, str]) -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return ast.literal_eval(proc.stdout.strip())


def test_corrupt_pair_flips_bits_in_peer_copies_only(fake_node):
    out = probe(fake_node("healthy", FAKE_P2P="0-1:not_supported,2-3:corrupt"))
    assert out["copies"] == {"0-1": True, "2-3": False, "3-2": False}
    assert out["can_0_1"] == 0


def test_failed_runtime_init_sticks_for_the_process_and_counts_across_processes(fake_node):
    env = fake_node("transient_802", FAKE_CUDART_FAIL_FIRST=1)
    assert probe(env) == {"first": 802, "second": 802}
    assert probe(env)["first"] == 0
    assert attempts(env, "cudart") == 2


@pytest.mark.skipif(real_driver_present(), reason="a real libcuda.so.1 is installed here")
def test_runtime_without_libcuda_answers_insufficient_driver(fake_node):
    out = probe(fake_node("no_driver"))
    assert out == {"first": 35, "second": 35}
