"""Playbooks: declarative TOML that says which checks run, in which order, and what to launch.

`checks` names check IDs; `layers` takes every check of those layers (a new check of the layer
joins by being registered). The job layers are taken whole; node checks are named one by one,
since they run in Slurm prologues as root. `fix` offers the remedies the findings name.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PLAYBOOK_DIR = Path(__file__).resolve().parent.parent / "playbooks"


class PlaybookError(Exception):
    """A playbook that cannot be found or read; the message names it."""


@dataclass(frozen=True)
class Playbook:
    name: str
    description: str
    checks: tuple[str, ...]
    reads_user_files: bool = True
    layers: tuple[str, ...] = ()  # the layers taken whole (their checks are in `checks`)
    launch: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    level: int = 1  # the least --level this playbook runs at (p2p: 2, the active test)
    active_checks: tuple[str, ...] = ()  # added at --level 2


def available() -> list[str]:
    return sorted(p.stem for p in PLAYBOOK_DIR.glob("*.toml"))


def load_playbook(name_or_path: str) -> Playbook:
    """Load a bundled playbook by name, or a TOML file by path."""
    path = Path(name_or_path)
    if path.suffix != ".toml":
        path = PLAYBOOK_DIR / f"{name_or_path}.toml"
        if not path.is_file():
            raise PlaybookError(f"unknown playbook {name_or_path!r} (available: {', '.join(available())})")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PlaybookError(f"{path}: cannot read playbook: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PlaybookError(f"{path}: not valid TOML: {exc}") from None
    if "remedies" in data:
        raise PlaybookError(f"{path}: 'remedies' is not read: `fix` offers the remedies the findings name; "
                            "remove it")
    named = _check_list(path, data, "checks")
    layers = _layer_list(path, data)
    from doctor import registry

    active = _check_list(path, data, "active_checks")
    registry.load_checks([*named, *active])
    missing = [c for c in named if c not in registry.CHECKS]
    if missing:
        raise PlaybookError(f"{path}: unknown check IDs: {', '.join(missing)}")
    if "checks" not in data and "layers" not in data:
        raise PlaybookError(f"{path}: give 'checks' (check IDs) or 'layers' (every check of those layers)")
    checks = list(dict.fromkeys([*named, *(c.id for layer in layers for c in registry.layer_checks(layer))]))
    return Playbook(
        name=str(data.get("name", path.stem)),
        description=str(data.get("description", "")),
        checks=tuple(checks),
        reads_user_files=bool(data.get("reads_user_files", True)),
        layers=tuple(layers),
        launch=dict(data.get("launch", {})),
        source=str(path),
        level=_level(path, data),
        active_checks=tuple(c for c in active if c in registry.CHECKS),
    )


def _level(path: Path, data: dict[str, Any]) -> int:
    level = data.get("level", 1)
    if level not in (1, 2):
        raise PlaybookError(f"{path}: 'level' must be 1 or 2, got {level!r}")
    return int(level)


def _layer_list(path: Path, data: dict[str, Any]) -> list[str]:
    from doctor.model import LAYER_ORDER

    value = data.get("layers", [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PlaybookError(f"{path}: 'layers' must be a list of layer names")
    unknown = [v for v in value if v not in LAYER_ORDER]
    if unknown:
        raise PlaybookError(f"{path}: unknown layers: {', '.join(unknown)} (layers: {', '.join(LAYER_ORDER)})")
    return value


def _check_list(path: Path, data: dict[str, Any], key: str) -> list[str]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
        raise PlaybookError(f"{path}: {key!r} must be a list of check IDs")
    return value
