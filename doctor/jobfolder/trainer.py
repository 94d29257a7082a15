"""TrainingArguments as a run gets them: CLI flags, config files, `TrainingArguments(...)` kwargs.

CLI flags follow HfArgumentParser: `--flag value`, `--flag=value`, a bare
boolean `--flag` meaning True, booleans spelled yes/true/t/y/1 or
no/false/f/n/0 in any case. A positional `.json`/`.yaml` argument is the
config file HfArgumentParser's `parse_json_file`/`parse_yaml_file` reads.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from typing import Any

from doctor.jobfolder.model import UNKNOWN, ArgValue, Command, KwCall, Site, TrainerArgs

BOOL_KEYS = {"load_best_model_at_end", "fp16", "bf16", "tf32", "do_train", "do_eval", "half_precision"}
TRACKED = BOOL_KEYS | {"eval_strategy", "evaluation_strategy", "save_strategy", "eval_steps", "save_steps",
                       "logging_steps", "metric_for_best_model"}
CONFIG_FLAGS = {"config", "config_file", "trainer_config", "training_config", "train_config"}
CONFIG_SUFFIXES = (".json", ".yaml", ".yml")
_TRUE = {"yes", "true", "t", "y", "1"}
_FALSE = {"no", "false", "f", "n", "0"}


def to_bool(value: Any) -> Any:
    """HfArgumentParser's string_to_bool; UNKNOWN where it would reject the value."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return bool(value)
    if isinstance(value, str):
        if value.lower() in _TRUE:
            return True
        if value.lower() in _FALSE:
            return False
    return UNKNOWN


def _clean(key: str, value: Any) -> Any:
    if isinstance(value, str) and ("$" in value or "`" in value):
        return UNKNOWN
    if key in BOOL_KEYS:
        return to_bool(value)
    if key in ("eval_steps", "save_steps", "logging_steps") and isinstance(value, str):
        try:
            return float(value) if "." in value else int(value)
        except ValueError:
            return UNKNOWN
    return value.lower() if isinstance(value, str) and key.endswith("strategy") else value


def parse_cli(args: tuple[str, ...]) -> tuple[dict[str, tuple[Any, str]], list[str]]:
    """({key: (value, token)}, config files) from a training script's argv."""
    values: dict[str, tuple[Any, str]] = {}
    configs: list[str] = []
    i = 0
    while i < len(args):
        tok = args[i]
        if tok.startswith("--") and len(tok) > 2:
            key, eq, val = tok[2:].partition("=")
            key = key.replace("-", "_")
            if not eq:
                nxt = args[i + 1] if i + 1 < len(args) else None
                if nxt is not None and not nxt.startswith("--"):
                    val = nxt
                    i += 1
                elif key in BOOL_KEYS:
                    val = "true"
                else:
                    val = ""
            if key in CONFIG_FLAGS and val.endswith(CONFIG_SUFFIXES):
                configs.append(val)
            if key in TRACKED:
                values[key] = (_clean(key, val), tok)
        elif tok.endswith(CONFIG_SUFFIXES) and not tok.startswith("-"):
            configs.append(tok)
        i += 1
    return values, configs


def read_config(path: str, text: str) -> tuple[dict[str, Any] | None, str | None]:
    """(mapping, problem) for a JSON or YAML config file."""
    try:
        if path.endswith(".json"):
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as exc:  # json/yaml errors of any kind
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return None, f"not valid {'JSON' if path.endswith('.json') else 'YAML'}: {first}"
    if not isinstance(data, dict):
        return None, "not a mapping of argument names to values"
    return data, None


def key_line(text: str, key: str) -> int:
    pat = re.compile(rf"""(["']?){re.escape(key)}\1\s*[:=]""")
    for n, line in enumerate(text.splitlines(), 1):
        if pat.search(line):
            return n
    return 1


def from_command(command: Command, script: str | None, args: tuple[str, ...], cwd: str,
                 read_text: Callable[[str], str | None],
                 note: Callable[[str, str], None]) -> TrainerArgs | None:
    """The TrainingArguments a launch passes on its command line (and config files)."""
    cli, configs = parse_cli(args)
    values: dict[str, ArgValue] = {}
    config_paths = []
    for cfg in configs:
        path = os.path.normpath(os.path.join(cwd, cfg))
        text = read_text(path)
        if text is None:
            continue
        config_paths.append(path)
        data, problem = read_config(path, text)
        if data is None:
            note(path, f"trainer config {cfg}: {problem}")
            continue
        lines = text.splitlines()
        for key, val in data.items():
            if key in TRACKED:
                n = key_line(text, key)
                values[key] = ArgValue(_clean(key, val), Site(path, n, lines[n - 1].strip() if lines else ""),
                                       "config", key)
    for key, (val, tok) in cli.items():
        values[key] = ArgValue(val, _token_site(command, tok), "cli", key)
    if not values:
        return None
    return TrainerArgs("cli", script, values, command.site, command, tuple(config_paths))


def _token_site(command: Command, tok: str) -> Site:
    """Where a flag is written: the assignment it came through (`ARGS="--x y"`), else its own line."""
    word = next((w for w in reversed(command.argv_words) if w.text == tok), None)
    if word is not None and word.via:
        return word.via[-1]
    line = word.span.line if word is not None else command.line_of(tok.split("=", 1)[0])
    text = next((raw for raw, ln in command.words if ln == line), tok)
    return Site(command.site.file, line, _line_text(command, line) or text)


def _line_text(command: Command, line: int) -> str:
    lines = command.text.splitlines()
    k = line - command.site.line
    return lines[k].strip() if 0 <= k < len(lines) else ""


def from_code(call: KwCall, script: str) -> TrainerArgs:
    values = {}
    for key, val in call.kwargs.items():
        if key in TRACKED:
            values[key] = ArgValue(_clean(key, val) if val is not UNKNOWN else UNKNOWN,
                                   call.kw_sites.get(key, call.site), "code", key)
    return TrainerArgs("code", script, values, call.site, partial=call.star_kwargs)
