"""The optional C reader of `gpu-doctor timeline` (doctor/timeline/_sweep.c).

Everything else is in pyproject.toml. The extension links against the OTF2 C library, found
through `otf2-config` (a Score-P or OTF2 install), `pkg-config otf2` (Debian:
libopen-trace-format2-dev) or the header in /usr/include. Without them, or when the compiler
fails, the install goes on and the timeline uses its pure-Python reader (one line says so).
GPU_DOCTOR_NO_C_READER=1 skips the extension on purpose.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

OTF2_HEADER = "/usr/include/otf2/otf2.h"
FALLBACK = "the timeline will use its pure-Python reader (slower; same results)"


def say(text: str) -> None:
    print(f"gpu-doctor: {text}", file=sys.stderr)


def tool_words(*argv: str) -> list[str] | None:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return shlex.split(out.stdout) if out.returncode == 0 else None


def otf2_flags() -> tuple[list[str], list[str]] | None:
    """(compile flags, link flags) for the OTF2 C library, or None when it is not installed."""
    cflags = tool_words("otf2-config", "--cflags")
    if cflags is not None:
        ldflags = (tool_words("otf2-config", "--ldflags") or []) + (tool_words("otf2-config", "--libs") or [])
        rpath = [f"-Wl,-rpath,{w[2:]}" for w in ldflags if w.startswith("-L")]
        return cflags, ldflags + rpath
    cflags = tool_words("pkg-config", "--cflags", "otf2")
    if cflags is not None:
        return cflags, tool_words("pkg-config", "--libs", "otf2") or ["-lopen-trace-format2"]
    if os.path.exists(OTF2_HEADER):
        return [], ["-lopen-trace-format2"]
    return None


class OptionalBuildExt(build_ext):
    """A failed compile is one line, not a failed install."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:
            say(f"the C reader was not built ({type(exc).__name__}: {exc}); {FALLBACK}")

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            say(f"the C reader was not built ({type(exc).__name__}: {exc}); {FALLBACK}")


def extensions() -> list[Extension]:
    if os.environ.get("GPU_DOCTOR_NO_C_READER"):
        say(f"GPU_DOCTOR_NO_C_READER is set: {FALLBACK}")
        return []
    flags = otf2_flags()
    if flags is None:
        say("no OTF2 development files (otf2-config, pkg-config otf2, /usr/include/otf2/otf2.h; Debian: "
            f"libopen-trace-format2-dev): {FALLBACK}")
        return []
    cflags, ldflags = flags
    return [Extension("doctor.timeline._sweep", ["doctor/timeline/_sweep.c"],
                      extra_compile_args=[*cflags, "-O2", "-std=c11"], extra_link_args=ldflags)]


if __name__ == "__main__":   # setuptools' build backend runs this file as __main__
    setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
