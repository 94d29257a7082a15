"""Redaction: one pass over the final document and every bundled file.

A `Redactor` is built from the environments the report shows (to learn which
values are secrets, the user name, the home folder and the host names), then
applied to every string that goes out: `document()` for the report, `text()`
for each bundled file. It counts what each rule changed; the report prints
those counts, and `--preview` prints them without writing anything.

Rules run in a fixed order: known secret values first (exact literals), then
URL credentials, vendor token shapes, secret-looking assignments, GPU UUIDs,
long random-looking strings, the home folder, the user name, and host names.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

MASK = "[redacted]"
ENV_ALLOW_PREFIXES = ("CUDA_", "NCCL_", "TORCH_", "PYTORCH_", "SCOREP_", "SLURM_", "OMP_",
                      "MASTER_", "RANK", "WORLD_SIZE", "LOCAL_")
SECRET_NAME_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL", "AUTH")
# Environment variables whose whole value is a host name (hashed with --hash-hosts).
HOST_VARS = ("SLURMD_NODENAME", "SLURM_NODELIST", "SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST",
             "SLURM_SUBMIT_HOST", "SLURM_LAUNCH_NODE_IPADDR", "SLURM_TOPOLOGY_ADDR", "MASTER_ADDR",
             "HOSTNAME")
# Mappings under these keys are environments: filtered by the allow-list.
ENV_KEYS = frozenset({"environment", "env"})
# System accounts are not personal data, and replacing "root" would garble prose.
NOT_PERSONAL_USERS = frozenset({"root", "nobody", "user", "admin", "slurm", "munge", "ubuntu"})

_ALLOW_TEXT = ", ".join(p + "*" if p.endswith("_") else p for p in ENV_ALLOW_PREFIXES)
RULES: dict[str, str] = {
    "env_not_allowed": f"environment variables outside the allow-list ({_ALLOW_TEXT}) left out",
    "env_secret_value": "values of variables whose name contains "
                        f"{', '.join(SECRET_NAME_WORDS)} masked",
    "known_secret": "the value of a secret variable found elsewhere (logs, scripts, argv) masked",
    "url_credentials": "user:password@ removed from URLs",
    "bearer_token": "bearer / Authorization header tokens masked",
    "hf_token": "Hugging Face tokens (hf_...) masked",
    "github_token": "GitHub tokens (ghp_..., github_pat_...) masked",
    "aws_access_key": "AWS access key ids (AKIA...) masked",
    "api_token": "other API token shapes (sk-..., xox?-..., glpat-..., JWTs) masked",
    "pem_block": "every line inside a PEM block (-----BEGIN ... to -----END ...) masked, and the key lines "
                 "before an -----END ... whose BEGIN is not in the excerpt",
    "email": "e-mail addresses masked",
    "secret_assignment": "NAME=value / --name value / \"name\": \"value\" / password X where the name says "
                         "secret (DB_PASS=, --db-pass=, --pw X, LDAP_PWD=, key passphrase: X), -u user:PW, "
                         "sshpass -p PW: the whole value masked",
    "high_entropy": "long random-looking strings masked",
    "gpu_uuid": "GPU UUIDs replaced by a short hash",
    "home_dir": "home folders replaced by ~ or /home/<user>",
    "user_name": "the user name replaced by <user>",
    "hostname": "host names replaced by a hash (--hash-hosts)",
}

_SECRET_WORDS_RE = "|".join(SECRET_NAME_WORDS)
_URL_CRED = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^\s/?#\"'<>]+)@(?=[^\s@/\"'<>]+)")
_BEARER = re.compile(r"(?i)(\bauthorization\b[\"']?\s*[:=]\s*[\"']?(?:bearer|basic|token)?\s*|\bbearer\s+)"
                     r"([A-Za-z0-9._~+/=-]{6,})")
_VENDOR = (
    ("hf_token", re.compile(r"\bhf_[A-Za-z0-9]{10,}")),
    ("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})")),
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b")),
    ("api_token", re.compile(r"\b(?:sk-[A-Za-z0-9_-]{20,}|xox[abprs]-[A-Za-z0-9-]{10,}|glpat-[A-Za-z0-9_-]{20,}"
                             r"|eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,})")),
)
# NAME=value, NAME: value, "name": "value"; the name decides (`secret_key_name`), not the regex.
_ASSIGN = re.compile(r"(?<![\w.-])([A-Za-z_][\w.-]*)([\"']?\s*[=:]\s*[\"']?)([^\s\"',;}\]]+)")
# A quoted value after a secret-looking key ("db_password": "correct battery staple"): all of it.
# The value is inside a lookahead: only the key is consumed, so `A: "db_password": "x y"` finds both keys.
_QUOTED_ASSIGN = re.compile(r"(?<![\w.-])([A-Za-z_][\w.-]*)(?=([\"']?[ \t]*[=:][ \t]*)([\"'])([^\"'\n]{1,4096})\3)")
# YAML / INI / prose: `password: correct battery staple`, `passwd = x y`: to the end of the line.
_LINE_KEY = re.compile(r"(?<![\w.-])([A-Za-z_][\w.-]*)([ \t]*[=:][ \t]*)(?=[^\"'\s])")
# Prose and netrc: `login with password X`, `machine h login u password X`.
_PROSE = re.compile(r"(?i)\b(password|passwd|passphrase)(\s+(?:is\s+|was\s+)?)([^\s\"']+)")
_EMAIL = re.compile(r"(?<![\w.+-])[A-Za-z0-9._%+-]{1,64}@(?:[A-Za-z0-9-]{1,63}\.)+[A-Za-z]{2,24}\b")
_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]{1,64}-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]{1,64}-----")
_FLAG = re.compile(r"(?<![\w-])--?([A-Za-z][\w-]*)(=|\s+)([^\s\"',;-][^\s\"',;]*)")
# The last word of a name that holds a secret (HF_TOKEN, api_key, hub-token, accessToken, X_AUTH) and
# words that make any name secret (SECRET_KEY_BASE). Not TOKENS or TOKENIZER: those are ML words.
SECRET_LAST_WORDS = frozenset({"token", "secret", "password", "passwd", "passphrase", "key", "apikey",
                               "credential", "credentials", "auth", "pat", "pass", "pw"})
SECRET_ANY_WORDS = frozenset({"secret", "password", "passwd", "passphrase", "credential", "credentials"})
# Last words that say secret only after another word: `LDAP_PWD`, `DB_PWD`, never `PWD` (the working folder).
SECRET_QUALIFIED_WORDS = frozenset({"pwd"})
# `curl -u user:PW`, `curl --user=user:PW`, `--proxy-user user:PW`: the part after the colon.
_USER_COLON = re.compile(r"(?<![\w-])(-u|--user|--proxy-user)(\s+|=)([\"']?)([^\s:\"']{1,256}):([^\s\"']+)")
# `sshpass -p PW` (and `-pPW`): the password itself on the command line.
_SSHPASS = re.compile(r"\b(sshpass\s+(?:-[a-oq-zA-Z]\s+\S+\s+)*-p\s*)([\"']?)([^\s\"']+)")
# One line of a PEM body: base64 only (the short last line of a key is one too), also after an
# excerpt's line-number gutter (`   6 | `, `>  8 | `).
_PEM_BODY = re.compile(r"(?P<gutter>[ \t>]*\d+ +\| ?)?[ \t]*[A-Za-z0-9+/=]{4,}[ \t]*")
_GPU_UUID = re.compile(r"\b(?:MIG-)?GPU-[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}\b")
_LONG = re.compile(r"(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/=_-]{32,}(?![A-Za-z0-9+/=_-])")
_OTHER_HOME = re.compile(r"/home/(?!<user>)([^/\s\"'<>:]+)")


def short_hash(text: str, prefix: str = "") -> str:
    """A stable 10-hex-digit digest, so equal inputs stay recognisably equal."""
    return prefix + hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:10]


def env_allowed(name: str) -> bool:
    return name.upper().startswith(ENV_ALLOW_PREFIXES)


def secret_name(name: str) -> bool:
    upper = name.upper()
    return any(word in upper for word in SECRET_NAME_WORDS)


def secret_key_name(name: str) -> bool:
    """Whether a key or flag name in text names a secret (stricter than `secret_name` for env names)."""
    words = [w.lower() for w in re.split(r"[_.\-]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)) if w]
    return bool(words) and (words[-1] in SECRET_LAST_WORDS or any(w in SECRET_ANY_WORDS for w in words)
                            or (len(words) > 1 and words[-1] in SECRET_QUALIFIED_WORDS))


def entropy(text: str) -> float:
    """Shannon entropy in bits per character."""
    counts = Counter(text)
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def looks_random(token: str) -> bool:
    """A long string that reads like a key rather than a word, path or identifier."""
    pieces = [p for p in token.split("/") if p] if token.startswith("/") or "//" in token else [token]
    for piece in pieces:
        if len(piece) < 32 or not any(c.isdigit() for c in piece) or not any(c.isalpha() for c in piece):
            continue
        if re.fullmatch(r"[0-9a-fA-F-]+", piece):
            if entropy(piece) >= 3.3:
                return True
        elif entropy(piece) >= 4.0 and any(c.isupper() for c in piece) and any(c.islower() for c in piece):
            return True
    return False


def _keep_value(value: str) -> bool:
    """Values that are references or already masked, not secrets."""
    return (value.startswith(("$", "<", "[redacted"))
            or value.lower() in ("", "none", "null", "true", "false", "bearer", "basic", "token"))


@dataclass
class Redactor:
    """Applies the rules to text and documents, counting what each rule changed."""

    enabled: bool = True
    hash_hosts: bool = False
    secrets: tuple[str, ...] = ()
    homes: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()
    counts: Counter[str] = field(default_factory=Counter)
    in_pem: bool = False  # inside a PEM block that began in an earlier string (a log line by line)

    @classmethod
    def for_environments(cls, envs: Iterable[Mapping[str, str]], *, enabled: bool = True,
                         hash_hosts: bool = False, homes: Iterable[str] = (), users: Iterable[str] = (),
                         hosts: Iterable[str] = ()) -> Redactor:
        """Learn secrets, home folders, user names and host names from environments."""
        secrets: set[str] = set()
        home_set = {h for h in homes if h}
        user_set = {u for u in users if u}
        host_set = {h for h in hosts if h}
        for env in envs:
            for name, value in env.items():
                if not isinstance(value, str):
                    continue
                if (secret_name(name) or secret_key_name(name)) and len(value) >= 8 and not value.isdigit() and not _keep_value(value):
                    secrets.add(value)
                if name == "HOME":
                    home_set.add(value)
                if name in ("USER", "LOGNAME", "SLURM_JOB_USER"):
                    user_set.add(value)
                if name in HOST_VARS:
                    host_set.update(split_hosts(value))
        return cls(
            enabled=enabled, hash_hosts=hash_hosts,
            secrets=tuple(sorted(secrets, key=len, reverse=True)),
            homes=tuple(sorted({h.rstrip("/") for h in home_set} - {""}, key=len, reverse=True)),
            users=tuple(sorted((u for u in user_set if len(u) >= 3 and u not in NOT_PERSONAL_USERS),
                               key=len, reverse=True)),
            hosts=tuple(sorted(host_set, key=len, reverse=True)),
        )

    # -- text -------------------------------------------------------------------------------

    def _sub(self, rule: str, pattern: re.Pattern[str], text: str,
             repl: Callable[[re.Match[str]], str]) -> str:
        def counted(m: re.Match[str]) -> str:
            out = repl(m)
            if out != m.group(0):
                self.counts[rule] += 1
            return out

        return pattern.sub(counted, text)

    def text(self, text: str) -> str:
        """Redact one string (a value, an evidence line, a whole bundled file)."""
        text = self._sub("gpu_uuid", _GPU_UUID, text, lambda m: short_hash(m.group(0), "GPU-"))
        if not self.enabled:
            return text
        text = self._pem(text)
        for secret in self.secrets:
            if secret in text:
                self.counts["known_secret"] += text.count(secret)
                text = text.replace(secret, MASK)
        text = self._sub("url_credentials", _URL_CRED, text, lambda m: f"{m.group(1)}{MASK}@")
        text = self._sub("secret_assignment", _USER_COLON, text,  # not `docker run -u 1000:1000` (uid:gid)
                         lambda m: m.group(0) if _keep_value(m.group(5)) or (m.group(4) + m.group(5)).isdigit()
                         else m.group(0)[:m.start(5) - m.start(0)] + MASK)
        text = self._sub("secret_assignment", _SSHPASS, text,
                         lambda m: m.group(0) if _keep_value(m.group(3)) else m.group(1) + m.group(2) + MASK)
        text = self._sub("bearer_token", _BEARER, text,
                         lambda m: m.group(0) if _keep_value(m.group(2)) else m.group(1) + MASK)
        for rule, pattern in _VENDOR:
            text = self._sub(rule, pattern, text, lambda m: MASK)
        text = self._sub("email", _EMAIL, text, lambda m: MASK)
        text = self._quoted_values(text)
        text = self._line_values(text)
        text = self._sub("secret_assignment", _PROSE, text,
                         lambda m: m.group(0) if _keep_value(m.group(3)) or m.group(3).startswith("[")
                         else m.group(1) + m.group(2) + MASK)
        text = self._sub("secret_assignment", _ASSIGN, text, _mask_value)
        text = self._sub("secret_assignment", _FLAG, text, _mask_value)
        text = self._sub("high_entropy", _LONG, text,
                         lambda m: MASK if looks_random(m.group(0)) else m.group(0))
        text = self._names(text)
        return text

    def _quoted_values(self, text: str) -> str:
        """`"db_password": "correct battery staple"`: the whole quoted value after a secret key."""
        spans = [m.span(4) for m in _QUOTED_ASSIGN.finditer(text)
                 if secret_key_name(m.group(1)) and not _keep_value(m.group(4))]
        for start, end in reversed(spans):
            text = text[:start] + MASK + text[end:]
            self.counts["secret_assignment"] += 1
        return text

    def _line_values(self, text: str) -> str:
        """`passwd: tiny pony`, `password = two words`: mask to the end of the line after a secret key.

        Keys are found without consuming what follows them, so `A: passwd: x` still finds `passwd`.
        """
        spans: list[tuple[int, int]] = []
        for m in _LINE_KEY.finditer(text):
            if spans and m.start() < spans[-1][1]:
                continue  # inside a value already masked
            if not secret_key_name(m.group(1)):
                continue
            start = m.end()
            end = text.find("\n", start)
            end = len(text) if end < 0 else end
            value = text[start:end].rstrip()
            if value and m.group(2) == "=" and re.fullmatch(r"[A-Z_][A-Z0-9_]*", m.group(1)):
                value = value.split(None, 1)[0]  # `DB_PASS=x python train.py`: a shell word, not the line
            if value and not _keep_value(value):
                spans.append((start, start + len(value)))
        for start, end in reversed(spans):
            text = text[:start] + MASK + text[end:]
            self.counts["secret_assignment"] += 1
        return text

    def file_text(self, text: str) -> str:
        """Redact one whole file (a bundled log or config): a PEM block never spills into the next."""
        self.in_pem = False
        try:
            return self.text(text)
        finally:
            self.in_pem = False

    def _pem(self, text: str) -> str:
        """Mask every line between a PEM BEGIN and its END, also across strings (line-wise logs)."""
        if not self.in_pem and "-----BEGIN " not in text and "-----END " not in text:
            return text
        lines = text.split("\n")
        for i, line in enumerate(lines):
            if not self.in_pem and _PEM_END.search(line) and not _PEM_BEGIN.search(line):
                self._pem_tail(lines, i)  # the excerpt began inside the key: its lines before END
                continue
            if self.in_pem:
                end = _PEM_END.search(line)
                if end:
                    self.in_pem = False
                    if end.start() > 0:
                        lines[i] = MASK + line[end.start():]
                        self.counts["pem_block"] += 1
                elif line.strip():
                    lines[i] = MASK
                    self.counts["pem_block"] += 1
                continue
            begin = _PEM_BEGIN.search(line)
            if begin:
                rest = line[begin.end():]
                end = _PEM_END.search(rest)
                if end:  # a whole block on one line
                    if rest[:end.start()].strip():
                        lines[i] = line[:begin.end()] + MASK + rest[end.start():]
                        self.counts["pem_block"] += 1
                else:
                    self.in_pem = True
                    if rest.strip():
                        lines[i] = line[:begin.end()] + MASK
                        self.counts["pem_block"] += 1
        return "\n".join(lines)

    def _pem_tail(self, lines: list[str], end: int) -> None:
        """Mask the key lines just above `lines[end]` (an END whose BEGIN is not in the text)."""
        head = lines[end][:_PEM_END.search(lines[end]).start()]  # type: ignore[union-attr]
        if head.strip() and _PEM_BODY.fullmatch(head):
            lines[end] = MASK + lines[end][len(head):]
            self.counts["pem_block"] += 1
        i = end - 1
        while i >= 0 and (body := _PEM_BODY.fullmatch(lines[i])):
            lines[i] = (body.group("gutter") or "") + MASK
            self.counts["pem_block"] += 1
            i -= 1

    def _names(self, text: str) -> str:
        for home in self.homes:
            pattern = re.compile(re.escape(home) + r"(?![A-Za-z0-9_.-])")
            text = self._sub("home_dir", pattern, text, lambda m: "~")
        text = self._sub("home_dir", _OTHER_HOME, text, lambda m: "/home/<user>")
        for user in self.users:
            pattern = re.compile(r"(?<![A-Za-z0-9])" + re.escape(user) + r"(?![A-Za-z0-9])")
            text = self._sub("user_name", pattern, text, lambda m: "<user>")
        if self.hash_hosts:
            for host in self.hosts:
                pattern = re.compile(r"(?<![A-Za-z0-9-])" + re.escape(host) + r"(?![A-Za-z0-9-])")
                text = self._sub("hostname", pattern, text, lambda m: short_hash(m.group(0), "host-"))
        return text

    # -- documents --------------------------------------------------------------------------

    def environment(self, env: Mapping[str, Any]) -> dict[str, Any]:
        """An environment as the report shows it: allow-listed names, secret values masked."""
        out: dict[str, Any] = {}
        for name in sorted(env):
            value = env[name]
            if self.enabled and not env_allowed(name):
                self.counts["env_not_allowed"] += 1
                continue
            if self.enabled and secret_name(name) and isinstance(value, str) and value:
                self.counts["env_secret_value"] += 1
                value = MASK
            elif self.enabled and self.hash_hosts and name in HOST_VARS and isinstance(value, str) and value:
                self.counts["hostname"] += 1
                value = short_hash(value, "host-")
            out[self.text(name)] = self.value(value)
        return out

    def value(self, obj: Any, key: str = "") -> Any:
        """Redact every string inside a JSON-like value; `environment` maps are filtered."""
        if isinstance(obj, str):
            if self.enabled and key and secret_key_name(key) and obj and not _keep_value(obj):
                self.counts["env_secret_value"] += 1
                return MASK
            return self.text(obj)
        if isinstance(obj, Mapping):
            if key in ENV_KEYS and all(isinstance(v, (str, type(None))) for v in obj.values()):
                return self.environment(obj)
            if key in ENV_KEYS and obj and all(isinstance(v, Mapping) for v in obj.values()):
                return {self._key(k): self.environment(v) for k, v in obj.items()}
            return {self._key(k): self.value(v, str(k)) for k, v in obj.items()}
        if isinstance(obj, (list, tuple, set, frozenset)):
            was_in_pem = self.in_pem
            try:
                return self._items(obj, key)
            finally:  # a block never spills out of the list of lines it began in
                self.in_pem = was_in_pem
        if obj is None or isinstance(obj, (bool, int, float)):
            return obj
        return self.text(str(obj))  # a Path or any other object goes out as its text: redact that

    def _key(self, key: object) -> str:
        """A mapping key: redacted as text, but never part of a PEM block the values are in."""
        was_in_pem, self.in_pem = self.in_pem, False
        try:
            return self.text(str(key))
        finally:
            self.in_pem = was_in_pem

    def _items(self, obj: Iterable[Any], key: str) -> list[Any]:
        out: list[Any] = []
        for v in obj:  # an argv: `--api-key`, `VALUE` as two items; the flag's name decides
            if (self.enabled and out and isinstance(v, str) and _secret_flag(out[-1])
                    and not v.startswith("-") and not _keep_value(v)):
                self.counts["secret_assignment"] += 1
                out.append(MASK)
            else:
                out.append(self.value(v, key))
        for i, item in enumerate(out):  # log lines one per item: a key's last lines before its END
            text = _line_of(item)
            if text is not None and _PEM_END.search(text) and not _PEM_BEGIN.search(text):
                j = i - 1
                while j >= 0 and (above := _line_of(out[j])) is not None and _PEM_BODY.fullmatch(above):
                    out[j] = MASK if isinstance(out[j], str) else {**out[j], "text": MASK}
                    self.counts["pem_block"] += 1
                    j -= 1
        return out

    def document(self, doc: Mapping[str, Any]) -> dict[str, Any]:
        self.in_pem = False
        try:
            return dict(self.value(doc))
        finally:
            self.in_pem = False

    def summary(self) -> dict[str, Any]:
        """What was redacted, for the report and for `--preview`."""
        return {
            "enabled": self.enabled,
            "hash_hosts": self.hash_hosts,
            "counts": {rule: self.counts[rule] for rule in RULES if self.counts[rule]},
            "rules": dict(RULES) if self.enabled else {"gpu_uuid": RULES["gpu_uuid"]},
        }

    def leaked(self, text: str) -> list[str]:
        """Known secret values still present in rendered output (a last safety net)."""
        return [s for s in self.secrets if s in text] if self.enabled else []


def _line_of(item: Any) -> str | None:
    """The text of one line in a list of lines: the string, or an excerpt line's `text`."""
    if isinstance(item, str):
        return item
    if isinstance(item, Mapping) and isinstance(item.get("text"), str):
        return str(item["text"])
    return None


def _secret_flag(item: Any) -> bool:
    """`--api-key` / `-password` alone in an argv item: the next item is its value."""
    m = re.fullmatch(r"--?([A-Za-z][\w-]*)", item) if isinstance(item, str) else None
    return m is not None and secret_key_name(m.group(1))


def _mask_value(m: re.Match[str]) -> str:
    """NAME=value -> NAME=[redacted] when the name says secret and the value is not a reference."""
    if not secret_key_name(m.group(1)) or _keep_value(m.group(3)):
        return m.group(0)
    return m.group(0)[:m.start(3) - m.start(0)] + MASK


def split_hosts(value: str, limit: int = 256) -> list[str]:
    """Host names in a Slurm-style list: 'n01,n02' and 'node[01-03,07]' (expanded, bounded)."""
    hosts: list[str] = []
    for part in re.split(r",(?![^\[]*\])", value):
        part = part.strip()
        if not part or re.fullmatch(r"[\d.:]+", part) or part in ("localhost", "127.0.0.1"):
            continue
        m = re.fullmatch(r"([^\[]+)\[([\d,-]+)\](.*)", part)
        names = [m.group(1) + n + m.group(3) for n in _expand(m.group(2), limit)] if m else [part]
        for name in names:
            hosts.append(name)
            if "." in name and not name.replace(".", "").isdigit():
                hosts.append(name.split(".", 1)[0])
    return [h for h in dict.fromkeys(hosts) if len(h) >= 2][:limit]


def _expand(ranges: str, limit: int) -> list[str]:
    out: list[str] = []
    for item in ranges.split(","):
        lo, _, hi = item.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            continue
        width = len(lo)
        for n in range(int(lo), int(hi or lo) + 1):
            out.append(str(n).zfill(width))
            if len(out) >= limit:
                return out
    return out
