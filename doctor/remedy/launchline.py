"""The launch lines of a job script: `python -m scorep ...` and the torchrun it may wrap.

Score-P's Python wrapper (`python -m scorep`) takes its own flags and passes
every other `-...` word to `scorep-config`; the first word that is not a flag
is the script it runs. When that script is torchrun (`torchrun`, `-m
torch.distributed.run`/`launch`, or a local wrapper that calls
`torch.distributed.run.main`), only the launcher agent is measured (LNC001).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from doctor.remedy.shell import Command, ShellScript, Word

PYTHON_RE = re.compile(r"(^|/)python[0-9.]*$")
TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")
TORCHRUN_WORD = re.compile(r"(^|[/(\s\"'])torchrun[\"']?\)?[\"']?$")  # torchrun, $(which torchrun), "$V/torchrun"
TORCHRUN_FLAGS = {"--standalone", "-m", "--module", "--no_python", "--run_path", "--use_env"}


@dataclass(frozen=True)
class ScorepLaunch:
    """One `python -m scorep [flags] target args` command."""

    cmd: Command
    python_index: int
    scorep_index: int
    options: tuple[Word, ...]
    dashdash: tuple[Word, ...]
    target_index: int | None

    @property
    def python(self) -> Word:
        return self.cmd.words[self.python_index]

    @property
    def scorep(self) -> Word:
        return self.cmd.words[self.scorep_index]

    @property
    def target(self) -> Word | None:
        return None if self.target_index is None else self.cmd.words[self.target_index]

    def has_option(self, name: str) -> bool:
        return any(o.text == name or o.text.startswith(name + "=") for o in self.options)


def scorep_launches(script: ShellScript) -> list[ScorepLaunch]:
    found = []
    for cmd in script.commands:
        words = cmd.words
        for i in range(1, len(words) - 1):
            if words[i].text == "-m" and words[i + 1].text == "scorep":
                found.append(_launch(cmd, i))
                break
    return found


def _launch(cmd: Command, m_index: int) -> ScorepLaunch:
    words = cmd.words
    j = m_index - 1
    while j > 0 and words[j].text.startswith("-") and not PYTHON_RE.search(words[j].text):
        j -= 1
    options: list[Word] = []
    dashdash: list[Word] = []
    k = m_index + 2
    while k < len(words) and words[k].text.startswith("-") and words[k].text != "-m":
        (dashdash if words[k].text == "--" else options).append(words[k])
        k += 1
    return ScorepLaunch(cmd, j, m_index + 1, tuple(options), tuple(dashdash),
                        k if k < len(words) else None)


def is_python(word: Word) -> bool:
    return bool(PYTHON_RE.search(word.text)) or word.raw.startswith("$")


@dataclass(frozen=True)
class Torchrun:
    """torchrun's own options and the training script it would start, as words of `cmd`."""

    cmd: Command
    first_option: int
    options: dict[str, str] = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    script_index: int | None = None

    @property
    def script(self) -> Word | None:
        return None if self.script_index is None else self.cmd.words[self.script_index]

    @property
    def script_args(self) -> tuple[Word, ...]:
        return () if self.script_index is None else self.cmd.words[self.script_index + 1:]

    def option(self, *names: str) -> str | None:
        return next((self.options[n] for n in names if n in self.options), None)


def wrapped_torchrun(launch: ScorepLaunch, base: Path) -> Torchrun | None:
    """The torchrun that `launch` wraps, or None when its target is a plain training script."""
    target = launch.target
    if target is None or launch.target_index is None:
        return None
    words = launch.cmd.words
    ti = launch.target_index
    if target.text == "-m":
        if ti + 1 < len(words) and words[ti + 1].text in TORCHRUN_MODULES:
            return parse_torchrun(launch.cmd, ti + 2)
        return None
    if Path(target.text).name == "torchrun" or TORCHRUN_WORD.search(target.raw) \
            or _calls_torchrun(target.text, base):
        return parse_torchrun(launch.cmd, ti + 1)
    return None


def _calls_torchrun(script: str, base: Path) -> bool:
    path = Path(script) if Path(script).is_absolute() else base / script
    if path.suffix != ".py" or not path.is_file():
        return False
    try:
        with path.open("rb") as fh:
            head = fh.read(200_000).decode("utf-8", "replace")
    except OSError:
        return False
    return any(m in head for m in TORCHRUN_MODULES)


def parse_torchrun(cmd: Command, first: int) -> Torchrun:
    words = cmd.words
    options: dict[str, str] = {}
    flags: list[str] = []
    i = first
    while i < len(words):
        text = words[i].text
        if not text.startswith("-"):
            break
        name, eq, _ = text.partition("=")
        name = "--" + name.lstrip("-").replace("-", "_") if name.startswith("--") else name
        if name in TORCHRUN_FLAGS:
            flags.append(name)
            i += 1
            if name in ("-m", "--module"):  # the next word is the module to run
                break
            continue
        if eq:
            raw = words[i].raw
            options[name] = raw[raw.find("=") + 1:]
            i += 1
        else:
            options[name] = words[i + 1].raw if i + 1 < len(words) else ""
            i += 2
    return Torchrun(cmd, first, options, tuple(flags), i if i < len(words) else None)
