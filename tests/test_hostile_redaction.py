"""Secrets the fuzzing campaign planted that survived redaction (issue 20), in every report format.

Each shape below got through before: an e-mail address (no rule), the short
last line of a PEM key, the rest of a quoted password after its first word,
`login with password X`, and the netrc form `machine h login u password X`.
"""

from __future__ import annotations

from typing import Any

import pytest
from report_util import bundle_files, make_job, secret_check
from test_report_output import preset

from doctor.report import cli
from doctor.report.redact import Redactor

PEM_BODY = ("MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7", "Zm9vYmFyYmF6", "q2Fy==")
PLANTED = {
    "email": "jane.doe+ddp@cluster-example.org",
    "quoted password": "correct battery staple",
    "prose password": "Tr0ub4dor",
    "netrc password": "hunter2netrc",
    "yaml passwd": "tiny pony",
}
LINES = [
    f"contact {PLANTED['email']} if the run fails",
    '{"db_password": "correct battery staple", "epochs": 3}',
    f"login with password {PLANTED['prose password']} then retry",
    "[CUPTI Activity] Dropped 85222 records. Current buffer size: 1048576 bytes",
    f"machine hub.example.org login alice password {PLANTED['netrc password']}",
    "-----BEGIN PRIVATE KEY-----",
    *PEM_BODY,
    "-----END PRIVATE KEY-----",
    f"passwd: {PLANTED['yaml passwd']}",
]
SIGNATURE = 4


def forbidden() -> list[str]:
    return [*PLANTED.values(), *PEM_BODY]


def leaked(text: str) -> list[str]:
    return [s for s in forbidden() if s in text]


@pytest.mark.parametrize("line, secret", [
    ("mail jane.doe+ddp@cluster-example.org today", "jane.doe+ddp@cluster-example.org"),
    ('"db_password": "correct battery staple"', "battery staple"),
    ("db_password = 'correct battery staple'", "battery staple"),
    ("passwd: tiny pony", "pony"),
    ("[auth]\npassword = two words", "two words"),
    ("login with password Tr0ub4dor then", "Tr0ub4dor"),
    ("machine h login u password hunter2netrc", "hunter2netrc"),
])
def test_each_planted_shape_is_masked_whole(line: str, secret: str) -> None:
    out = Redactor().text(line)
    assert secret not in out and "[redacted]" in out


def test_every_line_inside_a_pem_block_is_masked_also_when_lines_come_one_by_one() -> None:
    block = "\n".join(["key:", "-----BEGIN RSA PRIVATE KEY-----", *PEM_BODY, "-----END RSA PRIVATE KEY-----",
                       "after"])
    out = Redactor().file_text(block)
    assert not leaked(out) and "after" in out and "-----END RSA PRIVATE KEY-----" in out
    r = Redactor()
    doc = r.document({"lines": [{"n": i, "text": t} for i, t in enumerate(block.splitlines())]})
    texts = [x["text"] for x in doc["lines"]]
    assert not leaked("\n".join(texts)) and texts[-1] == "after"


def test_ordinary_lines_near_the_new_rules_survive() -> None:
    for text in ("ncclKernel_AllReduce_RING_LL_Sum_float", "tokens per second 1234", "step 10 loss 1.234",
                 "see https://docs.example.org/x", "SCOREP_TOTAL_MEMORY: 3500M"):
        assert Redactor().text(text) == text


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("planted")
    root = make_job(tmp / "job")
    (root / "secrets.log").write_text("\n".join(LINES) + "\n")
    facts = preset(root)
    facts["logscan"] = facts["logscan"] + [{
        "signature": "cupti_dropped", "file": str(root / "secrets.log"), "line": SIGNATURE,
        "text": LINES[SIGNATURE - 1], "values": {"dropped": 85222}}]
    out: dict[str, Any] = {}
    with secret_check(tmp) as playbook:
        for fmt in ("json", "md", "html", "tar.gz"):
            target = tmp / f"report.{fmt}"
            cli.run_report([str(root), "-o", str(target), "--playbook", str(playbook), "-q"], preset_facts=facts)
            out[fmt] = target
    return out


def test_planted_secrets_appear_in_no_format_and_not_in_the_bundle(reports: dict[str, Any]) -> None:
    counts = {}
    for fmt in ("json", "md", "html"):
        text = reports[fmt].read_text()
        assert "Dropped 85222 records" in text  # the excerpt is there, its secrets are not
        counts[fmt] = len(leaked(text))
    files = bundle_files(reports["tar.gz"])
    counts["tar.gz"] = sum(len(leaked(t)) for t in files.values())
    print(f"planted secrets found per format: {counts}")
    assert counts == {"json": 0, "md": 0, "html": 0, "tar.gz": 0}


# -- round 3 (issue 28): command-line spellings, and a key whose BEGIN is above the excerpt ----------

ROUND3 = {
    "curl -u": "CurlPw4242x",
    "--db-pass=": "DbPass4242x",
    "--pw": "PwFlag4242x",
    "DB_PASS= prefix": "DbEnv4242x",
    "LDAP_PWD= prefix": "LdapPw4242x",
    "sshpass -p": "SshPw4242x",
    "key passphrase:": "KeyPhrase4242x",
    "key tail": "S2V5VGFpbDEy",
}
ROUND3_BODY = "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZg"
ROUND3_LINES = [
    "-----BEGIN OPENSSH PRIVATE KEY-----",  # 1: above the first excerpt (lines 5-11)
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ",
    "AAAAMwAAAAtzc2gtZWQyNTUxOQAAACD1fuzz",
    "Q2hhbmdlZEtleUxpbmVCZWZvcmVFeGNlcnB0",
    ROUND3_BODY,  # 5: the excerpt starts inside the key
    ROUND3["key tail"],  # 6: its short last line
    "-----END OPENSSH PRIVATE KEY-----",
    "[CUPTI Activity] Dropped 85222 records. Current buffer size: 1048576 bytes",  # 8
    f"curl -u alice:{ROUND3['curl -u']} https://hub.example.org/upload",
    f"mysql --db-pass={ROUND3['--db-pass=']} -h db01",
    f"tool --pw {ROUND3['--pw']} --verbose",
    f"DB_PASS={ROUND3['DB_PASS= prefix']} python train.py",
    f"LDAP_PWD={ROUND3['LDAP_PWD= prefix']} ./sync.sh",
    f"sshpass -p {ROUND3['sshpass -p']} ssh node01",
    "[CUPTI Activity] Dropped 1024 records. Current buffer size: 1048576 bytes",  # 15
    f"Enter key passphrase: {ROUND3['key passphrase:']}",
]
ROUND3_SIGNATURES = (8, 15)


@pytest.mark.parametrize("line, secret", [(ln, s) for ln in ROUND3_LINES for name, s in ROUND3.items()
                                          if s in ln and name != "key tail"])
def test_each_round3_spelling_is_masked_and_the_command_kept(line: str, secret: str) -> None:
    out = Redactor().text(line)
    assert secret not in out and "[redacted]" in out, out
    if " python train.py" in line or " ./sync.sh" in line:
        assert out.endswith(line.split(" ", 1)[1])  # `DB_PASS=x python train.py`: the command stays


def test_a_key_tail_above_its_end_is_masked_when_the_begin_is_not_in_the_text() -> None:
    out = Redactor().text("\n".join(ROUND3_LINES[4:8]))
    assert ROUND3["key tail"] not in out and ROUND3_BODY not in out
    assert out.splitlines()[2:] == ROUND3_LINES[6:8]  # END and the log line after it are kept
    assert Redactor().text("PWD=/work/job OLDPWD=/home") == "PWD=/work/job OLDPWD=/home"  # folders, not secrets
    assert Redactor().text("docker run -u 1000:1000 img") == "docker run -u 1000:1000 img"  # uid:gid


@pytest.fixture(scope="module")
def round3_reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("planted3")
    root = make_job(tmp / "job")
    (root / "round3.log").write_text("\n".join(ROUND3_LINES) + "\n")
    facts = preset(root)
    facts["logscan"] = facts["logscan"] + [{
        "signature": "cupti_dropped", "file": str(root / "round3.log"), "line": n,
        "text": ROUND3_LINES[n - 1], "values": {"dropped": 85222}} for n in ROUND3_SIGNATURES]
    out: dict[str, Any] = {}
    with secret_check(tmp) as playbook:
        for fmt in ("json", "md", "html", "tar.gz"):
            target = tmp / f"report.{fmt}"
            cli.run_report([str(root), "-o", str(target), "--playbook", str(playbook), "-q"], preset_facts=facts)
            out[fmt] = target
    return out


def test_round3_secrets_appear_in_no_format_and_not_in_the_bundle(round3_reports: dict[str, Any]) -> None:
    found = {}
    for fmt in ("json", "md", "html"):
        text = round3_reports[fmt].read_text()
        assert "sshpass -p" in text and "-----END OPENSSH PRIVATE KEY-----" in text  # the excerpts are there
        found[fmt] = [name for name, s in ROUND3.items() if s in text]
    files = bundle_files(round3_reports["tar.gz"])
    assert any("round3" in name for name in files)
    found["tar.gz"] = [name for name, s in ROUND3.items() if any(s in t for t in files.values())]
    assert found == {"json": [], "md": [], "html": [], "tar.gz": []}
