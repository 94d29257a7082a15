"""Training-script edits with libcst: the seed's fixes, equivalent where they must be, form and comments kept."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from remedy_util import raised

from doctor.case import Case
from doctor.remedy import make_plan


def plan_one(tmp_path: Path, name: str, source: str | bytes, check: str, remedy: str):  # type: ignore[no-untyped-def]
    """The plan for what the real `check` raises on `name`, run by torchrun as 2 ranks with CUDA traced."""
    path = tmp_path / name
    path.write_bytes(source.encode() if isinstance(source, str) else source)
    if path.suffix == ".py":
        (tmp_path / "job.sh").write_text(f"export SCOREP_CUDA_ENABLE=kernel\ntorchrun --nproc_per_node=2 {name}\n")
    found = [f for f in raised(tmp_path, check) if remedy in f.remedies]
    assert found, f"{check} does not name {remedy} on {name}"
    return make_plan(Case(root=tmp_path), found, only=[remedy])


def fixed(tmp_path: Path, source: str | bytes, check: str, remedy: str, name: str = "train.py") -> str:
    plan = plan_one(tmp_path, name, source, check, remedy)
    rp = plan.remedies[0]
    assert rp.status == "ready", rp.note
    return plan.files[0].after.decode()


def comments(code: str) -> list[str]:
    return [m.group(0) for m in re.finditer(r"#[^\n]*", code)]


TRAIN = '''\
"""Training."""
import os  # stdlib
import scorep.user as su  # the user API

import torch


class Trainer:
    def training_step(self, batch):
        su.region_begin("step")  # open
        out = batch * 2
        su.region_end("step")
        return out

    def evaluate(self):
        with su.region("eval"):
            return os.getcwd()
'''


def write_fake_scorep(folder: Path) -> Path:
    pkg = folder / "fake" / "scorep"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "user.py").write_text(textwrap.dedent("""\
        import contextlib
        calls = []
        def region_begin(name): calls.append(("begin", name))
        def region_end(name): calls.append(("end", name))
        @contextlib.contextmanager
        def region(name):
            calls.append(("with", name)); yield
    """))
    return pkg.parent


def test_lazy_import_follows_the_seed_and_keeps_comments(tmp_path: Path) -> None:
    code = fixed(tmp_path, TRAIN, "SCR001", "lazy-scorep-import")
    assert "import scorep.user as su" not in code
    assert "_scorep_user = None  # None = not yet tried; False = import failed" in code
    assert "        if _load_scorep_user():\n            _scorep_user.region_begin(\"step\")  # open\n" in code
    assert "        with _load_scorep_user().region(\"eval\"):\n" in code
    assert comments(TRAIN)[:2] == ["# stdlib", "# the user API"]
    assert set(comments(TRAIN)) - {"# the user API"} <= set(comments(code))
    compile(code, "train.py", "exec")


RUN = """
import sys
sys.path[:0] = [{fake!r}] if {fake!r} else []
sys.modules.pop("scorep", None)
ns = {{"__name__": "train"}}
exec(compile(open({path!r}).read(), "train.py", "exec"), ns)
assert "scorep.user" not in sys.modules, "imported at module level"
t = ns["Trainer"]()
assert t.training_step(3) == 6
if {fake!r}:
    import scorep.user
    t.evaluate()
    print(scorep.user.calls)
else:
    print("no scorep, no error")
"""


@pytest.mark.parametrize("with_scorep", [True, False])
def test_lazy_import_imports_on_first_use_and_is_a_no_op_without_scorep(tmp_path: Path, with_scorep: bool) -> None:
    code = fixed(tmp_path, TRAIN.replace("import torch\n", ""), "SCR001", "lazy-scorep-import")
    path = tmp_path / "out.py"
    path.write_text(code)
    fake = str(write_fake_scorep(tmp_path)) if with_scorep else ""
    proc = subprocess.run([sys.executable, "-c", RUN.format(fake=fake, path=str(path))],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    expected = "[('begin', 'step'), ('end', 'step'), ('with', 'eval')]" if with_scorep else "no scorep, no error"
    assert proc.stdout.strip() == expected


GUARDED = '''\
import os

try:
    import scorep.user as su  # optional
except ImportError:
    su = None

import math


class Trainer:
    def training_step(self, batch):
        if su is not None:
            su.region_begin("step")
        out = batch * 2
        if su:
            su.region_end("step")
        return out

    def evaluate(self):
        with su.region("eval"):
            return os.getcwd()
'''


@pytest.mark.parametrize("with_scorep", [True, False])
def test_lazy_import_of_the_try_except_none_form_keeps_its_guards(tmp_path: Path, with_scorep: bool) -> None:
    code = fixed(tmp_path, GUARDED, "SCR001", "lazy-scorep-import")
    assert code.startswith("import os\n\nimport math\n\n_scorep_user = None")
    assert "        if _load_scorep_user() is not None:\n            _scorep_user.region_begin(\"step\")\n" in code
    assert "        if _load_scorep_user():\n            _scorep_user.region_end(\"step\")\n" in code
    path = tmp_path / "out.py"
    path.write_text(code)
    fake = str(write_fake_scorep(tmp_path)) if with_scorep else ""
    run = RUN.replace("t.evaluate()", "t.evaluate()" if with_scorep else "")
    proc = subprocess.run([sys.executable, "-c", run.format(fake=fake, path=str(path))],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    expected = "[('begin', 'step'), ('end', 'step'), ('with', 'eval')]" if with_scorep else "no scorep, no error"
    assert proc.stdout.strip() == expected


def test_lazy_import_refuses_a_name_assigned_again(tmp_path: Path) -> None:
    plan = plan_one(tmp_path, "train.py", "import scorep.user as su\n\n\ndef f():\n    global su\n    su = 1\n",
                    "SCR001", "lazy-scorep-import")
    assert plan.remedies[0].status == "cannot" and "assigned again" in plan.remedies[0].note


def test_lazy_import_from_form_inside_a_plain_try(tmp_path: Path) -> None:
    src = ("try:\n    from scorep import user\nexcept ImportError:\n    pass\n\n\n"
           "def step():\n    user.region_begin('a')\n")
    code = fixed(tmp_path, src, "SCR001", "lazy-scorep-import")
    assert "try:" not in code.split("def _load_scorep_user")[0]
    assert "    if _load_scorep_user():\n        _scorep_user.region_begin('a')\n" in code


def test_lazy_import_refuses_a_use_at_import_time(tmp_path: Path) -> None:
    plan = plan_one(tmp_path, "train.py", "import scorep.user\nscorep.user.region_begin('all')\n",
                    "SCR001", "lazy-scorep-import")
    rp = plan.remedies[0]
    assert rp.status == "cannot" and "import time" in rp.note and plan.files == ()
    assert any("field guide" in s for s in rp.steps)


def test_lazy_import_keeps_tabs_and_crlf(tmp_path: Path) -> None:
    src = "import scorep.user\r\n\r\n\r\ndef f():\r\n\tscorep.user.region_begin('a')\r\n\treturn 1\r\n"
    code = fixed(tmp_path, src.encode(), "SCR001", "lazy-scorep-import")
    assert "\n" not in code.replace("\r\n", "")
    assert "\tif _load_scorep_user():\r\n\t\t_scorep_user.region_begin('a')\r\n\treturn 1\r\n" in code
    assert "\t\ttry:\r\n\t\t\timport scorep.user\r\n" in code
    assert not re.search(r"^ +\S", code, re.MULTILINE)


def test_destroy_process_group_before_the_final_return_with_the_modules_alias(tmp_path: Path) -> None:
    src = ("import torch.distributed as dist\n\n\ndef train(model):\n    dist.init_process_group('nccl')\n"
           "    loss = model()  # one step\n    return loss\n")
    code = fixed(tmp_path, src, "SCR002", "destroy-process-group")
    assert code.endswith("    loss = model()  # one step\n\n"
                         "    # gpu-doctor SCR002: tear NCCL down before the interpreter (and Score-P) shut down,\n"
                         "    # so the NCCL watchdog cannot race Score-P's CUDA teardown at exit.\n"
                         "    if dist.is_initialized():\n        dist.destroy_process_group()\n    return loss\n")


def test_destroy_process_group_adds_the_import_and_goes_into_the_main_block(tmp_path: Path) -> None:
    src = "from transformers import Trainer\n\nif __name__ == '__main__':\n    Trainer().train()\n"
    code = fixed(tmp_path, src, "SCR002", "destroy-process-group")
    assert code.startswith("from transformers import Trainer\nimport torch.distributed as dist\n")
    assert code.endswith("    Trainer().train()\n\n    # gpu-doctor SCR002: tear NCCL down before the interpreter "
                         "(and Score-P) shut down,\n    # so the NCCL watchdog cannot race Score-P's CUDA teardown "
                         "at exit.\n    if dist.is_initialized():\n        dist.destroy_process_group()\n")


def test_destroy_process_group_in_a_tab_indented_crlf_file(tmp_path: Path) -> None:
    src = b"import torch\r\n\r\ndef main():\r\n\ttrainer.train()\r\n"
    code = fixed(tmp_path, src, "SCR002", "destroy-process-group")
    assert code.endswith("\tif torch.distributed.is_initialized():\r\n\t\ttorch.distributed.destroy_process_group()\r\n")
    assert "\n" not in code.replace("\r\n", "")


def test_producer_stream_captured_before_the_context(tmp_path: Path) -> None:
    src = ("def sync(self, metric_stack, cpu_buf, dev):\n"
           "    stream = self._metric_stream or torch.cuda.current_stream(dev)\n"
           "    # copy off the default stream\n"
           "    with torch.cuda.stream(stream):\n"
           "        stream.wait_stream(torch.cuda.current_stream(dev))\n"
           "        cpu_buf.copy_(metric_stack)\n"
           "    other.wait_stream(torch.cuda.current_stream(dev))\n")
    code = fixed(tmp_path, src, "SCR003", "stream-capture-producer")
    assert code == ("def sync(self, metric_stack, cpu_buf, dev):\n"
                    "    stream = self._metric_stream or torch.cuda.current_stream(dev)\n"
                    "    # copy off the default stream\n"
                    "    # gpu-doctor SCR003: the producer stream, captured before entering the stream context\n"
                    "    producer_stream = torch.cuda.current_stream(dev)\n"
                    "    with torch.cuda.stream(stream):\n"
                    "        stream.wait_stream(producer_stream)\n"
                    "        cpu_buf.copy_(metric_stack)\n"
                    "    other.wait_stream(torch.cuda.current_stream(dev))\n")


def test_a_wait_on_another_stream_is_left_alone(tmp_path: Path) -> None:
    src = "with torch.cuda.stream(s):\n    t.wait_stream(torch.cuda.current_stream())\n"
    plan = plan_one(tmp_path, "m.py", src, "SCR003", "stream-capture-producer")
    assert plan.files == () and plan.remedies[0].status == "nothing"


class _NoCuda:
    def cuda(self) -> None:
        raise RuntimeError("CUDA error: system not ready (802)")


FAKE_TORCH = type("torch", (), {"zeros": staticmethod(lambda n: _NoCuda())})


def test_assert_is_available_becomes_a_real_op_that_fails_with_the_same_message(tmp_path: Path) -> None:
    src = "import torch\n\n\ndef check():\n    # readiness\n    assert torch.cuda.is_available(), 'no GPU'\n"
    code = fixed(tmp_path, src, "SCR004", "cuda-real-op-check")
    assert "    # readiness\n    try:\n        torch.zeros(1).cuda()\n" in code
    ns: dict[str, object] = {}
    exec(compile(code.replace("import torch\n", ""), "m.py", "exec"), {"torch": FAKE_TORCH}, ns)
    with pytest.raises(RuntimeError, match="no GPU") as info:
        ns["check"]()  # type: ignore[operator]
    assert "802" in str(info.value.__cause__)


def test_assert_in_a_warmup_python_c_becomes_the_op_itself(tmp_path: Path) -> None:
    src = ('for i in $(seq 1 30); do\n  if python -c "import torch; assert torch.cuda.is_available(); '
           'torch.zeros(1).cuda()"; then break; fi\n  sleep 10\ndone\n')
    code = fixed(tmp_path, src, "SCR004", "cuda-real-op-check", name="warm.sh")
    assert code == src.replace("assert torch.cuda.is_available(); ", "")
