"""Open a gpu-doctor HTML report in headless Chromium, take a screenshot, and check what the page shows.

    python scripts/report_screenshot.py report.html --png shot.png --expect TST901 --expect "Log excerpts"

Prints the page title. Exit 0 when the page rendered with a gpu-doctor title and
every --expect text is in the rendered DOM, 1 when not, 2 when no Chromium is
installed (Debian: `apt-get install chromium`) or it could not run.
Chromium runs with networking features off and a throw-away profile, as root
too (`--no-sandbox`), in its own process group killed at the time limit.
"""

from __future__ import annotations

import argparse
import html
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from doctor.isolate import run_isolated

BINARIES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
         "--hide-scrollbars")


class ChromiumError(Exception):
    """Chromium is missing or did not produce what was asked."""


def find_chromium() -> str | None:
    """$GPU_DOCTOR_CHROMIUM, else the first Chromium/Chrome on PATH."""
    explicit = os.environ.get("GPU_DOCTOR_CHROMIUM")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    return next((path for name in BINARIES if (path := shutil.which(name))), None)


def _run(binary: str, action: list[str], page: Path, timeout: float) -> str:
    with tempfile.TemporaryDirectory(prefix="gpu-doctor-chromium-") as profile:
        argv = [binary, *FLAGS, f"--user-data-dir={profile}", *action, page.resolve().as_uri()]
        res = run_isolated(argv, timeout, env={**os.environ, "HOME": profile})
    if res.timed_out:
        raise ChromiumError(f"{binary} did not finish within {timeout:.0f} s")
    if res.returncode != 0:
        tail = res.stderr.strip().splitlines()[-1:] or ["no error output"]
        raise ChromiumError(f"{binary} exited with {res.returncode}: {tail[0]}")
    return res.stdout


def dump_dom(binary: str, page: Path, timeout: float = 60.0) -> str:
    """The DOM after Chromium loaded and laid out the page."""
    return _run(binary, ["--dump-dom"], page, timeout)


def screenshot(binary: str, page: Path, png: Path, size: str = "1280,2400", timeout: float = 60.0) -> Path:
    png.unlink(missing_ok=True)
    _run(binary, [f"--screenshot={png.resolve()}", f"--window-size={size}"], page, timeout)
    if not png.is_file() or png.read_bytes()[:8] != b"\x89PNG\r\n\x1a\n":
        raise ChromiumError(f"no PNG screenshot was written to {png}")
    return png


def page_title(dom: str) -> str | None:
    m = re.search(r"<title>(.*?)</title>", dom, re.S)
    return html.unescape(m.group(1)).strip() if m else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("html", type=Path)
    p.add_argument("--png", type=Path, help="screenshot file (default: next to the HTML)")
    p.add_argument("--expect", action="append", default=[], help="text the rendered page must contain")
    p.add_argument("--timeout", type=float, default=60.0)
    args = p.parse_args(argv)
    binary = find_chromium()
    if binary is None:
        print("report_screenshot: no chromium found (apt-get install chromium)", file=sys.stderr)
        return 2
    try:
        dom = dump_dom(binary, args.html, args.timeout)
        png = screenshot(binary, args.html, args.png or args.html.with_suffix(".png"), timeout=args.timeout)
    except ChromiumError as exc:
        print(f"report_screenshot: {exc}", file=sys.stderr)
        return 2
    title = page_title(dom)
    print(f"title: {title}\nscreenshot: {png}")
    text = html.unescape(dom)
    missing = [e for e in args.expect if e not in text]
    if not title or not title.startswith("gpu-doctor report") or missing:
        print(f"report_screenshot: page check failed (title {title!r}, missing {missing})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
