"""Build and write one report: run the checks, collect, redact, render, write atomically.

`write_report(case, target, settings)` is what `gpu-doctor report -o FILE` and the app's export
both call; the format follows the target's extension (.json, .md, .html, .tar.gz/.tgz).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from doctor.atomic import write_atomic
from doctor.case import Case
from doctor.report import bundle, collect, render_html, render_md
from doctor.report.redact import MASK, Redactor
from doctor.safeopen import UnsafeFile, check_replaceable
from doctor.sanitize import json_text
from doctor.wording import count

FORMATS = {".json": "json", ".md": "md", ".markdown": "md", ".html": "html", ".htm": "html",
           ".tar.gz": "bundle", ".tgz": "bundle"}


class ReportError(Exception):
    """The report cannot be made or written; the message (one line) says why."""


@dataclass(frozen=True)
class ReportSettings:
    """How the report is made: which checks, the threshold, redaction, the bundle's cap."""

    playbook: str | None = None  # default: node without a job folder, scorep-ddp with one
    fail_on: str = "error"
    budget_s: float = 60.0
    redact: bool = True
    hash_hosts: bool = False
    max_bundle_mb: float = 20.0
    quiet: bool = True  # no progress on stderr
    argv: tuple[str, ...] = ()  # the `gpu-doctor report` arguments the document records


@dataclass(frozen=True)
class Written:
    """A report on disk, and the exit code its checks give (0, or 1 for findings at the threshold)."""

    path: Path
    fmt: str
    size: int
    exit_code: int
    redaction_on: bool
    redacted_items: int

    def summary(self) -> str:
        return (f"gpu-doctor: wrote {self.path} ({self.fmt}, {count(self.size, 'byte')}); redaction: "
                f"{'on' if self.redaction_on else 'OFF'}, {count(self.redacted_items, 'item')}")


def output_format(name: str) -> str:
    lower = name.lower()
    for ext, fmt in FORMATS.items():
        if lower.endswith(ext):
            return fmt
    raise ReportError(f"cannot tell the report format from {name!r}: use a name ending in "
                      ".json, .md, .html or .tar.gz")


def check_writable(path: Path) -> None:
    """Fail before any check runs if the report could not be written there."""
    if path.is_dir():
        raise ReportError(f"cannot write {path}: it is a folder")
    try:
        check_replaceable(path)
    except UnsafeFile as exc:
        raise ReportError(f"cannot write {exc}") from None
    parent = path.parent
    if not parent.is_dir():
        raise ReportError(f"cannot write {path}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ReportError(f"cannot write {path}: folder {parent} is not writable")


def report_mode(private: bool) -> int:
    """0600 for an unredacted report, else what the umask allows."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o600 if private else 0o666 & ~umask


def write_report(case: Case, target: Path, settings: ReportSettings,
                 preset_facts: dict[str, Any] | None = None) -> Written:
    """Run the checks on the case and write the redacted report to `target`; raises ReportError."""
    fmt = output_format(str(target))
    check_writable(target)
    code, doc, redactor, extra = make_report(case, settings, fmt, preset_facts)
    data = render(fmt, doc, extra, settings.max_bundle_mb, lambda text: scrub(text, redactor))
    try:
        write_atomic(target, data, report_mode(private=not settings.redact))
    except UnsafeFile as exc:
        raise ReportError(f"cannot write {exc}") from None
    except OSError as exc:
        raise ReportError(f"cannot write {target}: {exc.strerror or exc}") from None
    return Written(target, fmt, len(data), code, redactor.enabled, sum(doc["redaction"]["counts"].values()))


def with_launch_python(case: Case) -> Case:
    """Without --python, the interpreter the job folder's last `gpu-doctor launch` ran (its launch.json):
    the job script's `python` looked up on this PATH may be another one, without torch."""
    from doctor.artifacts.runrecord import latest_run

    record = None if case.python else latest_run(case.root)
    if record is None or not record.python or not Path(record.python).is_file():
        return case
    return dataclasses.replace(case, python=record.python,
                               options={**case.options, "python_from": f"the last gpu-doctor launch ({record.path})"})


def make_report(case: Case, settings: ReportSettings, fmt: str, preset_facts: dict[str, Any] | None = None
                ) -> tuple[int, dict[str, Any], Redactor, list[bundle.BundleFile]]:
    """Run the checks and build the redacted document (and, for a bundle, its extra files)."""
    from doctor.playbook import PlaybookError, load_playbook
    from doctor.runner import run_checks
    from doctor.verdict import exit_code

    try:
        playbook = load_playbook(settings.playbook or ("node" if case.root is None else "scorep-ddp"))
    except PlaybookError as exc:
        raise ReportError(str(exc)) from None
    check_ids = list(playbook.checks)
    level = max(case.level, playbook.level)  # as the gate: --level 2 adds the active tests
    if level >= 2:
        check_ids += [c for c in playbook.active_checks if c not in check_ids]
    case = dataclasses.replace(case, level=level)
    case = with_launch_python(case)
    if not settings.quiet:
        print(f"gpu-doctor report: {count(len(check_ids), 'check')} ({playbook.name}) on {case.host}", file=sys.stderr)
    run = run_checks(case, check_ids, budget_s=settings.budget_s, playbook=playbook.name, mode="report",
                     preset_facts=preset_facts)
    raw = collect.build_document(run, list(settings.argv), settings.fail_on)
    homes, users = collect.homes_and_users()
    redactor = Redactor.for_environments(
        [case.env, raw["environment"]["job"]], enabled=settings.redact, hash_hosts=settings.hash_hosts,
        homes=homes, users=users, hosts=collect.host_names(run))
    extra: list[bundle.BundleFile] = []
    if fmt == "bundle":
        extra = [f.redacted(redactor.file_text) for f in bundle.gather(raw, case.root)]
    doc = redactor.document(raw)
    doc["redaction"] = redactor.summary()
    return int(exit_code(run, settings.fail_on)), doc, redactor, extra


def render(fmt: str, doc: dict[str, Any], extra: list[bundle.BundleFile], cap_mb: float,
           clean: Callable[[str], str] = lambda text: text) -> bytes:
    """The bytes to write; for a bundle, drops extra files that do not fit under the cap.

    `clean` runs over every rendered text (the last safety net against leaks).
    """
    if fmt != "bundle":
        return clean(_reports(doc)[f"report.{fmt}"]).encode("utf-8")
    cap = int(cap_mb * 1024 * 1024)
    base = sum(len(t.encode("utf-8")) for t in _reports(doc).values())
    if base + bundle.RESERVE > cap:
        raise ReportError(f"the report alone is {base / 2**20:.1f} MiB, over --max-bundle-mb {cap_mb:g}")
    kept, dropped = bundle.fit(extra, base, cap)
    doc["bundle"] = {"max_mb": cap_mb, "files": [f.name for f in kept], "left_out": dropped}
    kept = [bundle.BundleFile(f.folder, f.label, f.suffix, clean(f.text)) for f in kept]
    reports = {name: clean(text) for name, text in _reports(doc).items()}
    return bundle.pack(reports, kept, dropped)


def _reports(doc: dict[str, Any]) -> dict[str, str]:
    return {"report.json": dumps(doc), "report.md": render_md.render(doc),
            "report.html": render_html.render(doc)}


def dumps(doc: dict[str, Any]) -> str:
    return json_text(json.dumps(doc, indent=2, ensure_ascii=False, default=str)) + "\n"


def scrub(text: str, redactor: Redactor) -> str:
    """Last safety net: a known secret that still made it into rendered output is masked."""
    for secret in redactor.leaked(text):
        text = text.replace(secret, MASK)
    return text
