"""Which files a job folder analysis reads: discovery, and --launch / --script / PATH overrides."""

from __future__ import annotations

import os
from pathlib import Path

from jobfolder_util import case_for, job_of, write_job

from doctor.case import Case
from doctor.jobfolder.discover import load_job

FOLDER = {
    "job.sbatch": "#!/bin/bash\n#SBATCH -N 1\nsource env.sh\npython -m scorep --cuda train.py\n",
    "env.sh": "export SCOREP_TOTAL_MEMORY=1G\n",
    "other.sh": "python3 eval.py\n",
    "run_me": "#!/usr/bin/env bash\npython3 tool.py\n",
    "notes": "just text, no shebang\npython3 never.py\n",
    "train.py": "import helper\n",
    "helper.py": "x = 1\n",
    "eval.py": "pass\n",
    "tool.py": "pass\n",
    "scripts/prep.sh": "python3 prep.py\n",
    ".venv/bin/activate.sh": "python3 venv_thing.py\n",
    "scorep_rank_0/run.sh": "python3 nope.py\n",
    "a/b/c/deep.sh": "python3 deep.py\n",
}


def rel(job, paths) -> set[str]:  # type: ignore[no-untyped-def]
    return {os.path.relpath(p, job.root) for p in paths}


def test_discovery_finds_job_scripts_and_what_they_run(tmp_path: Path) -> None:
    job = job_of(write_job(tmp_path, FOLDER))
    assert rel(job, [f.path for f in job.shell_files]) == {
        "job.sbatch", "env.sh", "other.sh", "run_me", "scripts/prep.sh"}
    assert [f.role for f in job.shell_files if f.path.endswith("env.sh")] == ["sourced"]
    ran = {c.launch.target for c in job.commands if c.launch}
    assert ran == {"train.py", "eval.py", "tool.py", "prep.py"}
    # the sbatch script is flow 0 and the sourced file is part of it, not a job of its own
    sb = next(c for c in job.commands if c.launch and c.launch.target == "train.py")
    assert sb.flow == 0 and sb.env["SCOREP_TOTAL_MEMORY"].value == "1G"
    assert {s.role for s in job.scripts if s.path.endswith("helper.py")} == {"module"}


def test_launch_override_reads_only_that_script(tmp_path: Path) -> None:
    root = write_job(tmp_path, FOLDER)
    job = load_job(case_for(root, launch=(root / "other.sh",)))
    assert rel(job, [f.path for f in job.shell_files]) == {"other.sh"}
    assert [c.launch.target for c in job.commands if c.launch] == ["eval.py"]


def test_script_override_names_the_training_scripts(tmp_path: Path) -> None:
    root = write_job(tmp_path, FOLDER)
    job = load_job(case_for(root, scripts=(root / "tool.py",)))
    entries = rel(job, [s.path for s in job.entry_scripts()])
    assert entries == {"tool.py"}


def test_path_may_be_the_job_script_itself(tmp_path: Path) -> None:
    root = write_job(tmp_path, FOLDER)
    job = load_job(Case(root=root / "job.sbatch", env={"PATH": "/usr/bin"}))
    assert job.root == str(root)
    assert rel(job, [f.path for f in job.shell_files]) == {"job.sbatch", "env.sh"}


def test_path_may_be_a_training_script(tmp_path: Path) -> None:
    root = write_job(tmp_path, {"train.py": "import scorep.user\n", "other.py": "pass\n"})
    job = load_job(Case(root=root / "train.py", env={}))
    assert rel(job, [s.path for s in job.entry_scripts()]) == {"train.py"}


def test_without_launch_scripts_the_top_level_python_files_are_entries(tmp_path: Path) -> None:
    job = job_of(write_job(tmp_path, {"train.py": "import model\n", "model.py": "pass\n", "setup.py": "pass\n",
                                      "pkg/sub.py": "pass\n"}))
    assert rel(job, [s.path for s in job.entry_scripts()]) == {"train.py"}
    assert rel(job, [s.path for s in job.scripts if s.role == "module"]) == {"model.py"}


def test_relative_and_package_imports_resolve_inside_the_folder(tmp_path: Path) -> None:
    job = job_of(write_job(tmp_path, {
        "run.sh": "python src/train.py\n",
        "src/train.py": "from pkg import layers\nfrom pkg.util import helpers\nimport json\n",
        "src/pkg/__init__.py": "from . import layers\n",
        "src/pkg/layers.py": "from .util.helpers import f\n",
        "src/pkg/util/__init__.py": "",
        "src/pkg/util/helpers.py": "import scorep.user\n",
    }))
    entry = job.script(str(tmp_path / "src/train.py"))
    assert entry is not None
    closure = rel(job, [s.path for s in job.import_closure(entry)])
    assert closure == {"src/train.py", "src/pkg/__init__.py", "src/pkg/layers.py", "src/pkg/util/__init__.py",
                       "src/pkg/util/helpers.py"}


def test_the_job_env_is_the_instrumented_launch_env(tmp_path: Path) -> None:
    root = write_job(tmp_path, {"run.sh": "export PATH=/opt/scorep/bin:$PATH\npython3 -m scorep --cuda t.py\n"})
    job = load_job(case_for(root, env={"PATH": "/usr/bin"}))
    assert job.env["PATH"].value == "/opt/scorep/bin:/usr/bin"
    assert job.python == "python3"
