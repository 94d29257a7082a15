"""What `ast` finds in training code: scorep imports, teardown, stream self-waits, readiness tests."""

from __future__ import annotations

import textwrap

import pytest

from doctor.jobfolder.model import UNKNOWN
from doctor.jobfolder.pyscan import analyse


def scan(code: str, role: str = "entry"):  # type: ignore[no-untyped-def]
    return analyse("/job/train.py", textwrap.dedent(code).lstrip("\n"), role)


@pytest.mark.parametrize("code,line,guard", [
    ("import scorep.user\n", 1, None),
    ("import os\nimport scorep.user as su\n", 2, None),
    ("from scorep import user\n", 1, None),
    ("from scorep.user import region_begin, region_end\n", 1, None),
    ("import scorep\n", 1, None),
    ("try:\n    import scorep.user\nexcept ImportError:\n    pass\n", 2, "try"),
    ("import os\nif os.environ.get('TRACE'):\n    from scorep import user as su\n", 3, "if"),
    ("import importlib\nsu = importlib.import_module('scorep.user')\n", 2, None),
])
def test_import_time_scorep_imports(code: str, line: int, guard: str | None) -> None:
    s = scan(code)
    assert [(i.site.line, i.import_time, i.guard) for i in s.scorep_imports] == [(line, True, guard)]


def test_scorep_import_in_a_function_is_lazy_and_in_a_class_body_is_not() -> None:
    s = scan("""
        class T:
            import scorep.user as su
            def step(self):
                import scorep.user
        def f():
            from scorep import user
        """)
    assert [(i.site.line, i.import_time, i.scope) for i in s.scorep_imports] == [
        (2, True, "class"), (4, False, "function"), (6, False, "function")]


def test_main_guard_import_runs_for_the_entry_script_only() -> None:
    code = "if __name__ == '__main__':\n    import scorep.user\n"
    assert scan(code, "entry").scorep_imports[0].import_time
    assert not scan(code, "module").scorep_imports[0].import_time


@pytest.mark.parametrize("code", [
    "import torch.distributed as dist\ndist.destroy_process_group()\n",
    "import torch\ntorch.distributed.destroy_process_group()\n",
    "from torch.distributed import destroy_process_group as dpg\ndpg()\n",
    "from torch import distributed\ndef end():\n    if distributed.is_initialized():\n        distributed.destroy_process_group()\n",
])
def test_destroy_process_group_spellings(code: str) -> None:
    assert scan(code).destroy_pg


def test_init_and_trainer_train_carry_their_function_span() -> None:
    s = scan("""
        import torch.distributed as dist
        from transformers import Trainer
        def main():
            dist.init_process_group("nccl")
            trainer = Trainer(model=None)
            trainer.train()
            print("done")
        main()
        """)
    assert s.uses_hf
    assert [c.site.line for c in s.init_pg] == [4]
    train = s.trainer_train[0]
    assert train.site.line == 6 and train.function is not None
    assert (train.function.name, train.function.start, train.function.end) == ("main", 3, 7)


@pytest.mark.parametrize("code,line", [
    ("""
     import torch
     s = torch.cuda.Stream()
     with torch.cuda.stream(s):
         s.wait_stream(torch.cuda.current_stream())
     """, 4),
    ("""
     import torch
     def push(self, dev):
         stream = self._metric_stream or torch.cuda.current_stream(dev)
         with torch.cuda.stream(stream):
             stream.wait_stream(torch.cuda.current_stream(dev))
             self.cpu_buf.copy_(self.stack, non_blocking=True)
     """, 5),
    ("""
     from torch.cuda import current_stream, stream as use_stream
     def f(s):
         with use_stream(s):
             cur = current_stream()
             s.wait_stream(cur)
     """, 5),
    ("""
     import torch
     def f(s):
         with torch.cuda.stream(s):
             torch.cuda.current_stream().wait_stream(s)
     """, 4),
    ("""
     import torch
     def f(s, t):
         with torch.cuda.stream(s), torch.no_grad():
             if t:
                 s.wait_stream(torch.cuda.current_stream(device=0))
     """, 5),
])
def test_stream_self_wait_variants(code: str, line: int) -> None:
    s = scan(code)
    assert [w.site.line for w in s.self_waits] == [line]


@pytest.mark.parametrize("code", [
    """
    import torch
    def f(s, dev):
        producer = torch.cuda.current_stream(dev)
        with torch.cuda.stream(s):
            s.wait_stream(producer)
    """,
    """
    import torch
    def f(s):
        with torch.cuda.stream(s):
            s.wait_stream(torch.cuda.default_stream())
    """,
    """
    import torch
    def f(s, other):
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            def later():
                other.wait_stream(torch.cuda.current_stream())
    """,
])
def test_stream_waits_that_are_not_self_waits(code: str) -> None:
    assert scan(code).self_waits == ()


@pytest.mark.parametrize("code,count", [
    ("import torch\nassert torch.cuda.is_available()\n", 1),
    ("import torch\nassert torch.cuda.is_available(), 'no gpu'\n", 1),
    ("from torch import cuda\nassert cuda.is_available() and cuda.device_count() > 1\n", 1),
    ("from torch.cuda import is_available\nassert is_available()\n", 1),
    ("import sys, torch\nif not torch.cuda.is_available():\n    sys.exit(1)\n", 1),
    ("import torch\nif not torch.cuda.is_available():\n    raise SystemExit('no cuda')\n", 1),
    ("import torch\ndevice = 'cuda' if torch.cuda.is_available() else 'cpu'\n", 0),
    ("import torch\ntry:\n    torch.zeros(1).cuda()\nexcept Exception:\n    raise SystemExit(1)\n", 0),
])
def test_is_available_as_readiness_test(code: str, count: int) -> None:
    assert len(scan(code).cuda_asserts) == count


@pytest.mark.parametrize("code,ops", [
    ("import torch\ntorch.zeros(1).cuda()\n", 1),
    ("import torch\ntorch.ones(2, device='cuda:0')\n", 1),
    ("import torch\nx = torch.zeros(1).to('cuda')\n", 1),
    ("import torch\nx = torch.zeros(1).to(torch.device('cuda'))\n", 1),
    ("import torch\ntorch.cuda.init()\n", 1),
    ("import torch\nprint(torch.cuda.device_count())\n", 0),
])
def test_real_cuda_operations(code: str, ops: int) -> None:
    assert len(scan(code).cuda_ops) == ops


def test_training_arguments_keywords_are_literal_values_or_unknown() -> None:
    s = scan("""
        from transformers import IntervalStrategy, TrainingArguments
        args = TrainingArguments(
            output_dir="out",
            eval_strategy=IntervalStrategy.NO,
            save_strategy="steps",
            load_best_model_at_end=True,
            fp16=use_fp16,
        )
        """)
    call = s.training_args[0]
    assert call.kwargs["eval_strategy"] == "no" and call.kwargs["save_strategy"] == "steps"
    assert call.kwargs["load_best_model_at_end"] is True and call.kwargs["fp16"] is UNKNOWN
    assert call.kw_sites["load_best_model_at_end"].line == 6


def test_profiler_users_are_found() -> None:
    s = scan("""
        import torch
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            pass
        """)
    assert {site.line for site in s.profilers} == {3}


def test_syntax_error_is_a_problem_not_an_exception() -> None:
    s = scan("def broken(:\n    pass\n")
    assert s.problem is not None and "line 1" in s.problem


def test_the_analysis_time_bound_holds_in_a_worker_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """No signal tricks: the bound is checked by the visitor, so it holds in a TUI worker thread too."""
    import threading

    from doctor import limits
    from doctor.jobfolder import pyscan
    from doctor.jobfolder.model import PyScript

    text = "import torch\n" + "".join(f"x{i} = torch.zeros({i}).cuda()\n" for i in range(20_000))
    monkeypatch.setattr(limits, "MAX_PYTHON_SECONDS", 0.001)
    got: list[PyScript] = []
    worker = threading.Thread(target=lambda: got.append(pyscan.analyse("train.py", text, "entry")))
    worker.start()
    worker.join()
    assert got[0].problem == "analysis stopped after 0.001 s, the time limit for analysis; not analysed"
    assert limits.bound_problem(got[0].problem)
    assert pyscan.analyse("train.py", text, "entry", seconds=60).problem is None
