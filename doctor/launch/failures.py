"""Why a rank died, in the catalogue's words: its log's known signature and the check behind it.

After a launch, each failed rank's log (`rank_N.log`) is scanned for ART004's
signatures; a match names the check whose finding explains it ("rank 1: TRN001
(load_best_model_at_end needs matching strategies...)"), so the user knows
which finding to fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from doctor.artifacts.logscan import scan_logs
from doctor.artifacts.signatures import MESSAGES, SIGNATURE_CHECKS


@dataclass(frozen=True)
class RankFailure:
    rank: int
    check_id: str
    signature: str
    what: str
    file: str
    line: int

    def text(self, action: str = "") -> str:
        return f"rank {self.rank}: {self.check_id}{f' — {action}' if action else ''} ({self.what})"


def rank_failures(run_dir: str | Path, ranks: list[int]) -> list[RankFailure]:
    """The first known signature in the log of each of `ranks` (those that failed), in rank order."""
    paths = [Path(run_dir) / f"rank_{r}.log" for r in ranks]
    scan = scan_logs([p for p in paths if p.is_file()])
    out: dict[int, RankFailure] = {}
    for m in scan:
        rank = m["values"].get("rank")
        sig = m["signature"]
        if not isinstance(rank, int) or rank in out or rank not in ranks or sig not in MESSAGES:
            continue
        quiet = {**m, "values": {k: v for k, v in m["values"].items() if k != "rank"}}
        what, _data = MESSAGES[sig]([quiet])
        check_id = SIGNATURE_CHECKS.get(sig, ("ART004",))[0]
        out[rank] = RankFailure(rank, check_id, sig, what, m["file"], m["line"])
    return [out[r] for r in sorted(out)]
