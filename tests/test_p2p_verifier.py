"""P2P002's verifier on CPU: copy functions that corrupt, hang or fail for exactly one pair."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

from doctor.probes.p2p_child import (  # noqa: E402
    PeerVerifier,
    bytes_pattern,
    directions,
    mismatches,
    tensor_pattern,
)


def flip_bits_on(bad: tuple[int, int], positions=(5, 1000)):
    """A 'peer copy' that is exact except between `bad`, where it flips one bit per position."""
    calls: list[tuple[int, int]] = []

    def copy(src: int, dst: int, buf):
        calls.append((src, dst))
        out = buf.clone()
        if (src, dst) == bad:
            for i, pos in enumerate(positions):
                out[pos] ^= 1 << (3 + 20 * i)
        return out

    return copy, calls


def run(verifier: PeerVerifier, devices=(0, 1, 2), deadline=None):
    events: list[dict] = []
    verifier.run(list(devices), events.append, deadline)
    return events, directions([e for e in events if e["event"] == "pair"])


def test_bit_flips_on_one_pair_report_exactly_that_pair_with_count_and_offsets():
    copy, _ = flip_bits_on((0, 1))
    _, dirs = run(PeerVerifier(copy, elements=4096, iterations=2))

    corrupt = {k: d for k, d in dirs.items() if d["status"] == "corrupt"}
    assert list(corrupt) == [(0, 1)]
    d = corrupt[(0, 1)]
    assert d["bad_elements"] == 2
    # The 0->1 copy ran in the 0->1 test (forward) and in the 1->0 test (the way back).
    assert (d["bad_copies"], d["copies"]) == (4, 4)
    assert [b["index"] for b in d["first_bad"]] == [5, 1000]
    assert [b["byte"] for b in d["first_bad"]] == [40, 8000]
    assert all(b["flipped_bits"] == 1 and b["expected"] != b["got"] for b in d["first_bad"])
    assert all(dirs[k]["status"] == "ok" for k in dirs if k != (0, 1))


def test_clean_copies_pass_every_direction_with_a_bandwidth():
    copy, calls = flip_bits_on((-1, -1))
    events, dirs = run(PeerVerifier(copy, elements=1024, iterations=1))

    assert sorted(dirs) == [(s, d) for s in range(3) for d in range(3) if s != d]
    assert all(d["status"] == "ok" and d["bad_elements"] == 0 for d in dirs.values())
    assert all(d["gbps"] and d["gbps"] > 0 for d in dirs.values())
    # Each ordered pair is copied there and back: 6 tests x 2 copies.
    assert len(calls) == 12
    assert [e["event"] for e in events[:2]] == ["begin", "pair"]


def test_pair_without_peer_access_is_reported_and_never_copied_through_the_host():
    copy, calls = flip_bits_on((-1, -1))
    verifier = PeerVerifier(copy, peer_access=lambda s, d: {s, d} != {0, 2}, elements=256, iterations=1)
    _, dirs = run(verifier)

    assert dirs[(0, 2)]["status"] == dirs[(2, 0)]["status"] == "no_peer_access"
    assert not [c for c in calls if set(c) == {0, 2}]
    assert dirs[(0, 1)]["status"] == "ok"


def test_corruption_in_a_pair_with_one_way_peer_access_is_still_blamed_on_the_right_direction():
    copy, _ = flip_bits_on((1, 0), positions=(7,))
    verifier = PeerVerifier(copy, peer_access=lambda s, d: (s, d) != (0, 1), elements=256, iterations=1)
    _, dirs = run(verifier, devices=(0, 1))

    assert dirs[(0, 1)]["status"] == "no_peer_access"
    assert dirs[(1, 0)]["status"] == "corrupt"
    assert dirs[(1, 0)]["first_bad"][0]["index"] == 7


def test_a_failing_copy_marks_its_pair_as_error_and_the_others_still_run():
    def copy(src, dst, buf):
        if (src, dst) == (1, 2):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return buf.clone()

    _, dirs = run(PeerVerifier(copy, elements=256, iterations=1))

    assert dirs[(1, 2)]["status"] == "error"
    assert "illegal memory access" in dirs[(1, 2)]["error"]
    assert dirs[(2, 1)]["status"] == dirs[(0, 1)]["status"] == "ok"


def test_deadline_stops_before_the_next_pair_and_lists_what_was_not_tested():
    copy, calls = flip_bits_on((-1, -1))
    events, _ = run(PeerVerifier(copy, elements=64, iterations=1), deadline=time.monotonic() - 1)

    assert events == [{"event": "budget", "untested": [[0, 1], [0, 2], [1, 0], [1, 2], [2, 0], [2, 1]]}]
    assert calls == []


def test_patterns_are_neither_zero_nor_constant_and_change_with_the_seed():
    a, b = tensor_pattern(4096, 1), tensor_pattern(4096, 2)
    assert len(set(a.tolist())) == 4096 and not torch.equal(a, b)
    raw = bytes_pattern(4096, 1)
    words = {raw[i:i + 8] for i in range(0, len(raw), 8)}
    assert len(raw) == 4096 * 8 and len(words) == 4096 and raw != bytes_pattern(4096, 2)


def test_byte_buffers_are_compared_per_8_byte_element_like_tensors():
    good = bytes_pattern(1024, 3)
    bad = bytearray(good)
    bad[8 * 100 + 3] ^= 0x5A
    bad[8 * 900] ^= 0x01

    count, first = mismatches(good, bytes(bad), limit=1)

    assert count == 2
    assert first == [{"index": 100, "byte": 800, "expected": first[0]["expected"],
                      "got": first[0]["got"], "flipped_bits": 4}]
    assert mismatches(good, good, 8) == (0, [])
