"""Score-P values parsed as Score-P parses them: sizes and the SCOREP_CUDA_ENABLE set."""

from __future__ import annotations

import pytest

from doctor.jobfolder.scorep_values import (
    TOTAL_MEMORY_LIMIT,
    SizeError,
    format_size,
    is_true,
    parse_cuda_enable,
    parse_size,
)

K, M, G, T, P, E = (1024 ** k for k in range(1, 7))


@pytest.mark.parametrize("text,expected", [
    ("0", 0), ("16M", 16 * M), ("16m", 16 * M), ("3500M", 3500 * M), ("4G", 4 * G), ("4g", 4 * G),
    ("4GB", 4 * G), ("4gb", 4 * G), ("4Gb", 4 * G), ("1024", 1024), ("1024B", 1024), ("1024b", 1024),
    ("8k", 8 * K), ("2T", 2 * T), ("1P", P), ("3E", 3 * E), (" 64M ", 64 * M), ("64 M", 64 * M),
    ("64\tMB\n", 64 * M), ("4294967295", TOTAL_MEMORY_LIMIT), ("007M", 7 * M),
])
def test_sizes_parse_like_scorep(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", [
    "", "   ", "M", "4.5G", "-1G", "4 G B x", "4GiB", "4BB", "4Z", "1e9", "4G4", "0x10", "four", "16E",
    "99999999999999999999",
])
def test_sizes_scorep_rejects_are_errors(text: str) -> None:
    with pytest.raises(SizeError):
        parse_size(text)


def test_four_gib_is_above_the_total_memory_limit_and_3500m_is_not() -> None:
    assert parse_size("4G") > TOTAL_MEMORY_LIMIT
    assert parse_size("4096M") > TOTAL_MEMORY_LIMIT
    assert parse_size("4194303K") <= TOTAL_MEMORY_LIMIT
    assert parse_size("3500M") <= TOTAL_MEMORY_LIMIT


def test_format_size_uses_the_largest_exact_unit() -> None:
    assert format_size(1 << 20) == "1M"
    assert format_size(64 << 20) == "64M"
    assert format_size(8889000) == "8889000"
    assert format_size(3 * 1024) == "3K"


@pytest.mark.parametrize("value,invalid", [
    ("kernel,memcpy,sync", ()), ("kernel memcpy;sync:idle", ()), ("KERNEL,Memcpy", ()),
    ("default,~kernel_counter", ()), ("yes", ()), ("1", ()), ("", ()), ("kernel,,memcpy", ()),
    ("kernels,memcpy", ("kernels",)), ("kernel,memcopy,nccl", ("memcopy", "nccl")), ("~kernels", ("~kernels",)),
])
def test_cuda_enable_entries_checked_against_the_accepted_set(value: str, invalid: tuple[str, ...]) -> None:
    assert parse_cuda_enable(value).invalid == invalid


def test_cuda_enable_none_and_no_disable_cuda_recording() -> None:
    assert parse_cuda_enable("no").disabled
    assert parse_cuda_enable("NONE").disabled
    assert parse_cuda_enable("~kernel").disabled
    assert not parse_cuda_enable("kernel").disabled


def test_cuda_enable_proposal_corrects_spellings_and_drops_unknowns() -> None:
    assert parse_cuda_enable("kernels,memcopy,sync,nccl").proposed() == "kernel,memcpy,sync"
    assert parse_cuda_enable("bogus").proposed() == "default"


def test_scorep_bool_parsing() -> None:
    assert is_true("true") and is_true("Yes") and is_true("on") and is_true("2")
    assert not is_true("0") and not is_true("false") and not is_true("maybe") and not is_true(None)
