"""A value set in a file the job writes as it runs (`cat > "$RUN/scorep.env" <<EOF ... EOF`, then `. "$RUN/scorep.env"`):
bash read it there, but that file is not in the job folder. The evidence and the remedy point at the line of the
job folder that writes it, never at a file the user does not have."""

from __future__ import annotations

from pathlib import Path

import pytest
from jobfolder_util import run_check, write_job

from doctor.cli import main
from doctor.model import Status
from doctor.observe import sandbox

pytestmark = pytest.mark.skipif(sandbox.kind() is None, reason="neither bubblewrap nor unshare works here")


def test_a_value_from_a_file_the_job_writes_points_at_the_here_document_that_writes_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_job(tmp_path, {"job.sbatch": """
        #!/bin/bash
        #SBATCH --ntasks=1
        RUN=run_${SLURM_JOB_ID:-0}
        mkdir -p "$RUN"
        MEMORY=6G
        cat > "$RUN/scorep.env" <<EOF2
        export SCOREP_TOTAL_MEMORY=$MEMORY
        EOF2
        . "$RUN/scorep.env"
        python -m scorep train.py
        """, "train.py": "import torch\n"})
    (out,) = [o for o in run_check("SCP003", tmp_path, options={"observe": True}) if o.status is Status.FAIL]
    assert "SCOREP_TOTAL_MEMORY=6G" in out.message
    assert [(e.file, e.line) for e in out.evidence] == [("job.sbatch", 7)], out.evidence
    assert main(["fix", str(tmp_path), "--only", "scorep-total-memory", "--diff"]) in (0, 1)
    said = "".join(capsys.readouterr())
    assert "does not exist" not in said and "job.sbatch:7" in said, said
