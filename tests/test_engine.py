"""The runner: dependency order and skips, probe failures, the budget, parallel probes, isolation."""

from __future__ import annotations

import threading
import time

import pytest
from fakes.node import pid_alive

from doctor import facts, registry
from doctor.case import Case
from doctor.facts import ProbeFailure, ProbeTimeout, provider
from doctor.isolate import run_isolated
from doctor.model import fail, passed
from doctor.runner import run_checks


@pytest.fixture
def catalogue():
    """Register test checks/providers for one test, then restore the real catalogue."""
    registry.load()
    saved = dict(registry.CHECKS), dict(facts.PROVIDERS)
    yield registry
    registry.CHECKS.clear()
    registry.CHECKS.update(saved[0])
    facts.PROVIDERS.clear()
    facts.PROVIDERS.update(saved[1])


def case() -> Case:
    return Case(env={}, host="testhost")


def test_failed_dependency_skips_its_dependents_saying_why(catalogue):
    catalogue.check("ENG901", "script", "base")(lambda facts: fail("boom"))
    catalogue.check("ENG902", "script", "dependent", depends_on=["ENG901"])(lambda facts: passed("ran"))
    run = run_checks(case(), ["ENG902"])  # the dependency is pulled in and runs first
    assert [r.check_id for r in run.results] == ["ENG901", "ENG902"]
    second = run.result("ENG902")
    assert second.status.value == "skip"
    assert second.message == "skipped: depends on ENG901, which is fail (boom)"


def test_passed_dependency_lets_the_dependent_run(catalogue):
    catalogue.check("ENG901", "script", "base")(lambda facts: passed("fine"))
    catalogue.check("ENG902", "script", "dependent", depends_on=["ENG901"])(lambda facts: passed("ran"))
    assert run_checks(case(), ["ENG902"]).result("ENG902").message == "ran"


def test_probe_timeout_and_error_become_timeout_and_unknown(catalogue):
    def slow(ctx):
        raise ProbeTimeout("cuInit did not return within 1.0 s (killed)")

    def broken(ctx):
        raise ValueError("bad NVML answer")

    provider("tst_slow")(slow)
    provider("tst_broken")(broken)
    catalogue.check("ENG901", "node", "slow", needs=["tst_slow"])(lambda facts: passed("never"))
    catalogue.check("ENG902", "node", "broken", needs=["tst_broken"])(lambda facts: passed("never"))
    run = run_checks(case(), ["ENG901", "ENG902"])
    assert run.result("ENG901").status.value == "timeout"
    assert run.result("ENG901").message == "probe 'tst_slow' timed out: cuInit did not return within 1.0 s (killed)"
    assert run.result("ENG902").status.value == "unknown"
    assert run.result("ENG902").message == "probe 'tst_broken' failed: ValueError: bad NVML answer"


def test_check_that_handles_failures_sees_the_probe_failure(catalogue):
    def broken(ctx):
        raise OSError("gone")

    provider("tst_broken")(broken)
    seen = []
    catalogue.check("ENG901", "script", "tolerant", needs=["tst_broken"], handles_failures=True)(
        lambda facts: seen.append(facts["tst_broken"]) or passed("coped"))
    assert run_checks(case(), ["ENG901"]).result("ENG901").message == "coped"
    assert isinstance(seen[0], ProbeFailure) and seen[0].kind == "error"


def test_check_bug_is_unknown_not_a_crash(catalogue):
    catalogue.check("ENG901", "script", "buggy")(lambda facts: 1 / 0)
    result = run_checks(case(), ["ENG901"]).result("ENG901")
    assert result.status.value == "unknown"
    assert result.message == "internal error in ENG901: ZeroDivisionError: division by zero"


def test_isolated_probe_is_capped_by_the_budget(catalogue):
    def sleeper(ctx):
        out = run_isolated(["sleep", "30"], ctx.limit(60))
        if out.timed_out:
            raise ProbeTimeout(f"sleep did not return within {out.duration_s:.1f} s (killed)")
        return "done"

    provider("tst_sleep", timeout=60)(sleeper)
    catalogue.check("ENG901", "node", "sleepy", needs=["tst_sleep"])(lambda facts: passed("never"))
    t0 = time.monotonic()
    run = run_checks(case(), ["ENG901"], budget_s=1.0)
    assert time.monotonic() - t0 < 1.0 + 1.5
    assert run.result("ENG901").status.value == "timeout"


def test_runner_stops_waiting_for_a_probe_that_ignores_the_budget(catalogue):
    release = threading.Event()
    provider("tst_stuck")(lambda ctx: release.wait(30) and "late")
    catalogue.check("ENG901", "node", "stuck", needs=["tst_stuck"])(lambda facts: passed("never"))
    try:
        t0 = time.monotonic()
        run = run_checks(case(), ["ENG901"], budget_s=0.5)
        assert time.monotonic() - t0 < 0.5 + 2.0
        result = run.result("ENG901")
        assert result.status.value == "timeout"
        assert "the run's time budget ran out" in result.message
    finally:
        release.set()


def test_independent_probes_run_in_parallel(catalogue):
    # Each probe waits for the other at a barrier: run one after the other, both would break.
    barrier = threading.Barrier(2, timeout=10)

    def meet(ctx):
        barrier.wait()
        return "met"

    provider("tst_a")(meet)
    provider("tst_b")(meet)
    catalogue.check("ENG901", "script", "a", needs=["tst_a"])(lambda facts: passed(facts["tst_a"]))
    catalogue.check("ENG902", "script", "b", needs=["tst_b"])(lambda facts: passed(facts["tst_b"]))
    run = run_checks(case(), ["ENG901", "ENG902"], budget_s=20)
    assert [r.message for r in run.results] == ["met", "met"]


def test_a_fact_is_gathered_once_per_run(catalogue):
    calls = []
    provider("tst_once")(lambda ctx: calls.append(1) or len(calls))
    for cid in ("ENG901", "ENG902", "ENG903"):
        catalogue.check(cid, "script", cid, needs=["tst_once"])(lambda facts: passed(str(facts["tst_once"])))
    run = run_checks(case(), ["ENG901", "ENG902", "ENG903"])
    assert calls == [1] and {r.message for r in run.results} == {"1"}


def test_run_isolated_kills_the_whole_process_group():
    out = run_isolated(["sh", "-c", "sleep 30 & echo $!; exec sleep 30"], timeout=0.5)
    assert out.timed_out
    helper = int(out.stdout.split()[0])
    deadline = time.monotonic() + 5
    while pid_alive(helper) and time.monotonic() < deadline:  # reaped by init, asynchronously
        time.sleep(0.01)
    assert not pid_alive(helper)


def test_check_evidence_is_the_evidence_of_its_bad_findings() -> None:
    """A failing check's evidence does not list what one of its passing findings showed."""
    from doctor.model import CheckResult, Evidence, Finding, fail, passed

    ok = Finding.stamp("X001", "node", passed("launch 1 is fine", Evidence("good line", "job.sh", 5)))
    bad = Finding.stamp("X001", "node", fail("launch 2 is broken", Evidence("bad line", "job.sh", 7), "r"))
    res = CheckResult.from_findings("X001", "node", "t", (ok, bad), 1.0)
    assert [(e.file, e.line) for e in res.evidence] == [("job.sh", 7)]
    clean = CheckResult.from_findings("X001", "node", "t", (ok,), 1.0)
    assert [(e.file, e.line) for e in clean.evidence] == [("job.sh", 5)]
