"""Find Score-P experiment folders under a job folder and read their settings.

Score-P writes one folder per measured process: `SCOREP_EXPERIMENT_DIRECTORY`
(the per-rank launch uses `scorep_rank_N`), or, unnamed, `scorep-measurement-tmp`
renamed to `scorep-YYYYMMDD_HHMM_<id>` at the end (`scorep-failed-*` when the
run failed). Each holds `MANIFEST.md` and `scorep.cfg` from the start, and
`traces.otf2` + `traces.def` + `traces/` and/or `profile.cubex` once it flushed.
Command line equivalent: `find PATH -maxdepth 3 -name scorep.cfg`.
"""

from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from doctor.safeopen import open_text

RANK_DIR = re.compile(r"^scorep[_-]?rank[_-]?(\d+)$", re.IGNORECASE)
DATED_DIR = re.compile(r"^scorep-\d{8}_\d{4}_")
TMP_DIR = "scorep-measurement-tmp"
FAILED_DIR = re.compile(r"^scorep-failed")
MARKERS = ("scorep.cfg", "traces.otf2", "profile.cubex", "MANIFEST.md")
SKIP_DIRS = {".git", ".hg", ".svn", "__pycache__", "node_modules", "site-packages", ".tox",
             ".mypy_cache", ".pytest_cache", ".ruff_cache", "traces"}
MAX_DEPTH = 3
MAX_CFG_LINES = 100_000  # scorep.cfg / MANIFEST.md lines read (Score-P writes a few hundred)
MAX_DIRS = 20000
OFF_VALUES = {"", "no", "false", "0", "none", "off"}


@dataclass(frozen=True)
class ScorepConfig:
    """`scorep.cfg`: the settings the run really had, with the line of each."""

    path: str
    values: dict[str, str] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)

    def get(self, name: str) -> str | None:
        return self.values.get(name)

    def evidence_line(self, name: str) -> str:
        return f"{name}={self.values.get(name, '')}"


@dataclass(frozen=True)
class ExperimentDir:
    """One experiment folder as found on disk (before reading traces/profiles)."""

    path: str
    kind: str  # rank | dated | tmp | failed | named
    rank: int | None
    config: ScorepConfig | None
    manifest: bool
    explicit: tuple[str, ...]  # variables MANIFEST.md lists as explicitly set
    trace_anchor: str | None
    profile: str | None
    files: tuple[str, ...]  # top-level entries, sorted (for evidence)
    problems: tuple[str, ...]

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def has_data(self) -> bool:
        return self.trace_anchor is not None or self.profile is not None


def parse_scorep_cfg(path: Path) -> ScorepConfig:
    """Parse `NAME=value` lines; Score-P quotes strings and set members ('a','b')."""
    values: dict[str, str] = {}
    lines: dict[str, int] = {}
    with open_text(path) as fh:
        for lineno, raw in enumerate(itertools.islice(fh, MAX_CFG_LINES), 1):
            line = raw.strip()
            if not line or line.startswith("#") or "=" not in line:
                continue
            name, _, value = line.partition("=")
            name = name.strip()
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                continue
            values[name] = _unquote(value.strip())
            lines[name] = lineno
    return ScorepConfig(str(path), values, lines)


def _unquote(value: str) -> str:
    if "'" not in value and '"' not in value:
        return value
    parts = re.findall(r"'([^']*)'|\"([^\"]*)\"", value)
    return ",".join(a or b for a, b in parts)


def parse_manifest(path: Path) -> tuple[str, ...]:
    """The variables MANIFEST.md lists under 'explicitly set'."""
    names: list[str] = []
    in_list = False
    with open_text(path) as fh:
        for raw in itertools.islice(fh, MAX_CFG_LINES):
            if "explicitly set" in raw:
                in_list = True
                continue
            if in_list:
                m = re.match(r"^\s{4,}(SCOREP_[A-Z0-9_]+)\s*$", raw)
                if m:
                    names.append(m.group(1))
                elif raw.startswith("#"):
                    break
    return tuple(names)


def cuda_requested(value: str | None) -> bool:
    """Whether a SCOREP_CUDA_ENABLE value asks for any CUDA recording."""
    if value is None:
        return False
    members = [m for m in re.split(r"[\s,:;]+", value.strip().lower()) if m]
    return any(m not in OFF_VALUES and not m.startswith("~") for m in members)


def classify(name: str) -> tuple[str, int | None] | None:
    """(kind, rank) for a folder named like Score-P output, else None."""
    m = RANK_DIR.match(name)
    if m:
        return "rank", int(m.group(1))
    if name == TMP_DIR:
        return "tmp", None
    if FAILED_DIR.match(name):
        return "failed", None
    if DATED_DIR.match(name):
        return "dated", None
    return None


def read_experiment(path: Path, kind: str, rank: int | None) -> ExperimentDir:
    """Look at one experiment folder: which files it has and what they say."""
    problems: list[str] = []
    try:
        entries = sorted(os.listdir(path))
    except OSError as exc:
        return ExperimentDir(str(path), kind, rank, None, False, (), None, None, (),
                             (f"cannot list folder: {exc.strerror or exc}",))
    config = None
    if "scorep.cfg" in entries:
        try:
            config = parse_scorep_cfg(path / "scorep.cfg")
        except OSError as exc:
            problems.append(f"scorep.cfg unreadable: {exc.strerror or exc}")
    explicit: tuple[str, ...] = ()
    if "MANIFEST.md" in entries:
        try:
            explicit = parse_manifest(path / "MANIFEST.md")
        except OSError as exc:
            problems.append(f"MANIFEST.md unreadable: {exc.strerror or exc}")
    anchor = str(path / "traces.otf2") if "traces.otf2" in entries else None
    profile = str(path / "profile.cubex") if "profile.cubex" in entries else None
    if not entries:
        problems.append("empty folder: the process never got as far as Score-P's initialisation")
    elif anchor is None and profile is None:
        if "traces" in entries or "traces.def" in entries:
            problems.append("trace incomplete: traces/ or traces.def without the traces.otf2 anchor "
                            "(the process died while Score-P was flushing)")
        else:
            problems.append(f"no trace or profile, only {', '.join(entries)}: the process died "
                            "before Score-P flushed its measurement")
    return ExperimentDir(str(path), kind, rank, config, "MANIFEST.md" in entries, explicit,
                         anchor, profile, tuple(entries), tuple(problems))


def discover(root: Path, follow_symlinks: bool = True) -> list[ExperimentDir]:
    """Experiment folders under root (root itself when it is one), ranks first, then by path."""
    if _has_marker(root):
        kind, rank = classify(root.name) or ("named", None)
        return [read_experiment(root, kind, rank)]
    found: list[ExperimentDir] = []
    visited = 0
    stack: list[tuple[Path, int]] = [(root, 0)]
    while stack and visited < MAX_DIRS:
        folder, depth = stack.pop()
        visited += 1
        try:
            with os.scandir(folder) as it:
                children = [e for e in it if _is_dir(e, follow_symlinks)]
        except OSError:
            continue
        for entry in children:
            known = classify(entry.name)
            path = Path(entry.path)
            if known is not None or _has_marker(path):
                kind, rank = known or ("named", None)
                found.append(read_experiment(path, kind, rank))
            elif depth + 1 < MAX_DEPTH and not _skipped(entry.name, path):
                stack.append((path, depth + 1))
    return sorted(found, key=lambda e: (e.rank is None, e.rank or 0, e.path))


def _is_dir(entry: os.DirEntry[str], follow_symlinks: bool) -> bool:
    try:
        return entry.is_dir(follow_symlinks=follow_symlinks)
    except OSError:
        return False


def _has_marker(path: Path) -> bool:
    return any((path / m).exists() for m in MARKERS[:3])


def _skipped(name: str, path: Path) -> bool:
    if name in SKIP_DIRS or (name.startswith(".") and name != ".gpu-doctor"):
        return True
    return (path / "pyvenv.cfg").exists()
