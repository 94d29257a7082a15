"""The .tar.gz bundle: the report in all three formats plus the raw material a
support team reads next (log excerpts, per-rank log tails, `scorep.cfg` files,
the timeline analysis as `timeline.json`, trace summaries), size-capped.

Extra files are gathered raw by `gather`, redacted by the caller's Redactor
(the same pass as the document), then packed by `pack`, which drops whatever
does not fit under the cap, largest-value first, and says so in MANIFEST.txt.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from doctor import safeopen
from doctor.report import sources
from doctor.wording import count

TOP = "gpu-doctor-report"
MAX_CFGS = 32
RESERVE = 64 * 1024  # room for the file list that the bundled report carries


@dataclass(frozen=True)
class BundleFile:
    """One extra file: `folder/label+suffix`, where `label` is a raw path to redact and sanitise."""

    folder: str
    label: str
    suffix: str
    text: str

    @property
    def name(self) -> str:
        return f"{self.folder + '/' if self.folder else ''}{safe_name(self.label)}{self.suffix}"

    @property
    def size(self) -> int:
        return len(self.text.encode("utf-8"))

    def redacted(self, redact: Callable[[str], str]) -> BundleFile:
        return BundleFile(self.folder, redact(self.label), self.suffix, redact(self.text))


def safe_name(text: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._")
    return name[-120:] or "file"


def gather(doc: Mapping[str, Any], root: Path | None) -> list[BundleFile]:
    """Raw (unredacted) extra files, most useful first."""
    files: list[BundleFile] = []
    by_file: dict[str, list[Mapping[str, Any]]] = {}
    for ex in doc.get("log_excerpts", []):
        by_file.setdefault(ex["file"], []).append(ex)
    from doctor.report.view import excerpt_text

    for file, excerpts in by_file.items():
        body = "\n\n".join(f"== {ex['signature']} at line {ex['line']} ==\n{excerpt_text(ex)}"
                             for ex in excerpts)
        files.append(BundleFile("logs", file, ".excerpts.txt", f"# excerpts of {file}\n\n{body}\n"))
    for r in doc.get("last_launch", {}).get("ranks", []):
        tail = sources.log_tail(Path(r["log"])) if r.get("log") else []
        tail = tail or list(r.get("last_lines") or [])
        if tail:
            files.append(BundleFile("runs", f"rank{r['rank']}", ".tail.txt",
                                    f"# last {count(len(tail), 'line')} of {r['log']}\n" + "\n".join(tail) + "\n"))
    for path in _scorep_cfgs(doc, root):
        try:
            with safeopen.open_text(path) as fh:
                text = fh.read(256 * 1024)
        except OSError:
            continue
        files.append(BundleFile("scorep", str(path.parent), "/scorep.cfg", text))
    result = (doc.get("timeline") or {}).get("result")
    if result:  # the `gpu-doctor timeline --json` document, beside report.json
        files.append(BundleFile("", "timeline", ".json", json.dumps(result, indent=2, default=str) + "\n"))
    for exp in doc.get("experiments", []):
        if exp.get("summary"):
            files.append(BundleFile("traces", str(exp.get("path") or "experiment"), ".summary.json",
                                    json.dumps(exp["summary"], indent=2, default=str) + "\n"))
    return files


def _scorep_cfgs(doc: Mapping[str, Any], root: Path | None) -> list[Path]:
    found: dict[Path, None] = {}
    for exp in doc.get("experiments", []):
        if exp.get("path"):
            cfg = Path(exp["path"]) / "scorep.cfg"
            if cfg.is_file():
                found[cfg] = None
    if not found and root is not None and root.is_dir():  # no experiments fact: look a little ourselves
        for depth in ("scorep.cfg", "*/scorep.cfg", "*/*/scorep.cfg"):
            for cfg in sorted(root.glob(depth)):
                found[cfg] = None
                if len(found) >= MAX_CFGS:
                    return list(found)
    return list(found)


def fit(files: list[BundleFile], report_size: int, cap_bytes: int) -> tuple[list[BundleFile], list[str]]:
    """The extra files that fit under the cap after the report, in order; and the names left out."""
    room = cap_bytes - report_size - RESERVE
    kept, dropped = [], []
    for f in files:
        if f.size <= room:
            kept.append(f)
            room -= f.size
        else:
            dropped.append(f"{f.name} ({count(f.size, 'byte')})")
    return kept, dropped


def pack(reports: Mapping[str, str], extra: list[BundleFile], dropped: list[str]) -> bytes:
    """The .tar.gz bytes: reports, extra files and a MANIFEST.txt, all under one top folder."""
    manifest = ["gpu-doctor report bundle", "", "Files:"]
    manifest += [f"  {name}" for name in reports] + [f"  {f.name}" for f in extra]
    if dropped:
        manifest += ["", "Left out to stay under --max-bundle-mb:"] + [f"  {d}" for d in dropped]
    entries = [*reports.items(), *((f.name, f.text) for f in extra),
               ("MANIFEST.txt", "\n".join(manifest) + "\n")]
    buf = io.BytesIO()
    now = time.time()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
        for name, text in entries:
            data = text.encode("utf-8")
            info = tarfile.TarInfo(f"{TOP}/{name}")
            info.size, info.mtime, info.mode = len(data), int(now), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
