"""The HTML report in a real browser: headless Chromium loads it offline, shows the title and a finding."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from report_util import NO_NODE, make_job, secret_check

from doctor.report import cli

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "report_screenshot.py"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("report_screenshot", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_html_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    shot = load_script()
    binary = shot.find_chromium()
    if binary is None:
        pytest.skip("no chromium on PATH (Debian: apt-get install chromium); the HTML is checked as text "
                    "in test_report_output")
    root = make_job(tmp_path / "job")
    page = tmp_path / "report.html"
    with secret_check(tmp_path) as playbook:
        assert cli.run_report([str(root), "-o", str(page), "--playbook", str(playbook), "-q"],
                              preset_facts=NO_NODE) == 1
    dom = shot.dump_dom(binary, page)
    title = shot.page_title(dom)
    assert title is not None and title.startswith("gpu-doctor report: ") and title.endswith("(FAIL)")
    assert 'id="check-TST901"' in dom and "Planted secrets (test)" in dom
    assert "Log excerpts" in dom
    png = shot.screenshot(binary, page, tmp_path / "report.png")
    assert png.stat().st_size > 10_000  # a rendered page, not a blank one


def test_screenshot_script_says_when_chromium_is_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    shot = load_script()
    monkeypatch.setenv("GPU_DOCTOR_CHROMIUM", str(tmp_path / "no-such-chromium"))
    page = tmp_path / "r.html"
    page.write_text("<title>x</title>")
    assert shot.main([str(page)]) == 2
    assert "no chromium found" in capsys.readouterr().err
