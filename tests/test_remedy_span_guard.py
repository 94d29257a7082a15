"""Shell edits never land in a Python file: a launch read from Python words (submitit's
`CommandFunction([...])`, a `subprocess.run([...])` list) has spans in a .py file, and a remedy that
edits spans must say the manual step there instead of writing shell into Python."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from doctor.remedy.model import CannotPlan
from doctor.remedy.spans import SpanEdits
from doctor.remedy.text import TextDoc


class _Ctx:
    def __init__(self, files: dict[Path, bytes]):
        self.files = files
        self.written: list[Path] = []

    def read_doc(self, path: Path) -> TextDoc:
        return TextDoc(self.files[path])

    def write_doc(self, path: Path, doc: Any, *_: Any) -> None:
        self.written.append(path)


@pytest.mark.parametrize("name, text", [
    ("launch.py", b"import submitit\nfn = submitit.helpers.CommandFunction(['bash', 'task.sh'])\n"),
    ("launcher", b"#!/usr/bin/env python3\nimport subprocess\n"),
])
def test_a_python_file_is_never_edited_as_shell(tmp_path: Path, name: str, text: bytes) -> None:
    path = tmp_path / name
    ctx = _Ctx({path: text})
    edits = SpanEdits(ctx)  # type: ignore[arg-type]
    with pytest.raises(CannotPlan) as raised:
        edits.insert_lines_before(str(path), 1, ["export SCOREP_TOTAL_MEMORY=64M"])
    assert raised.value.reason == f"{name} is Python: a shell edit does not belong there"
    assert raised.value.steps and name in raised.value.steps[0]
    assert ctx.written == []


def test_a_shell_script_is_edited(tmp_path: Path) -> None:
    path = tmp_path / "task.sh"
    ctx = _Ctx({path: b"#!/bin/bash\nexec python -m scorep train.py\n"})
    edits = SpanEdits(ctx)  # type: ignore[arg-type]
    edits.insert_lines_before(str(path), 2, ["export SCOREP_TOTAL_MEMORY=64M"])
    assert edits.doc(str(path)).render() == b"#!/bin/bash\nexport SCOREP_TOTAL_MEMORY=64M\nexec python -m scorep train.py\n"
    edits.write("env", "one line")
    assert ctx.written == [path]
