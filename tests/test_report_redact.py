"""The redaction rules, one behaviour each, on the strings a report carries."""

from __future__ import annotations

import pytest

from doctor.report.redact import MASK, Redactor, env_allowed, looks_random, split_hosts

ENV = {
    "HF_TOKEN": "hf_AbCdEfGhIjKlMnOpQrStUvWx1234",
    "WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567",
    "NCCL_IB_AUTH": "1",
    "SCOREP_CUDA_BUFFER": "1M",
    "HOME": "/home/alice",
    "USER": "alice",
    "PATH": "/usr/bin:/home/alice/bin",
}


def redactor(**kw: object) -> Redactor:
    return Redactor.for_environments([ENV], **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("name, allowed", [
    ("CUDA_VISIBLE_DEVICES", True), ("NCCL_DEBUG", True), ("TORCH_HOME", True),
    ("PYTORCH_CUDA_ALLOC_CONF", True),
    ("SCOREP_TOTAL_MEMORY", True), ("SLURM_JOB_ID", True), ("OMP_NUM_THREADS", True), ("MASTER_ADDR", True),
    ("RANK", True), ("WORLD_SIZE", True), ("LOCAL_RANK", True),
    ("HF_TOKEN", False), ("PATH", False), ("HOME", False), ("LD_PRELOAD", False), ("CUDAX", False),
])
def test_environment_allow_list_is_by_prefix(name: str, allowed: bool) -> None:
    assert env_allowed(name) is allowed


def test_environment_keeps_allowed_names_and_masks_secret_named_values() -> None:
    r = redactor()
    shown = r.environment(ENV)
    assert shown == {"NCCL_IB_AUTH": MASK, "SCOREP_CUDA_BUFFER": "1M"}
    assert r.counts["env_not_allowed"] == 5 and r.counts["env_secret_value"] == 1


def test_a_secret_value_is_masked_wherever_it_appears() -> None:
    r = redactor()
    line = f"wandb login {ENV['WANDB_API_KEY']} ok"
    assert r.text(line) == f"wandb login {MASK} ok"
    assert r.counts["known_secret"] == 1


@pytest.mark.parametrize("raw, expected", [
    ("fetch https://bob:hunter2@host.example.org/x now", f"fetch https://{MASK}@host.example.org/x now"),
    ("git+ssh://bob:p@ss@git.example.org/repo.git", f"git+ssh://{MASK}@git.example.org/repo.git"),
    ("postgres://svc:pw@db:5432/runs", f"postgres://{MASK}@db:5432/runs"),
    ("https://example.org/a@b", "https://example.org/a@b"),
])
def test_url_credentials_are_removed(raw: str, expected: str) -> None:
    assert redactor().text(raw) == expected


@pytest.mark.parametrize("raw, secret, rule", [
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload", "eyJhbGciOiJIUzI1NiJ9", "bearer_token"),
    ("sending bearer abcdef123456 upstream", "abcdef123456", "bearer_token"),
    ("token hf_ZyXwVuTsRqPoNmLkJiHg987 in log", "hf_ZyXwVuTsRqPoNmLkJiHg987", "hf_token"),
    ("push with ghp_abcdefghijklmnopqrstuvwxyz0123456789", "ghp_abcdefghij", "github_token"),
    ("key id AKIAIOSFODNN7EXAMPLE used", "AKIAIOSFODNN7EXAMPLE", "aws_access_key"),
    ("openai sk-proj-abcdefghijklmnopqrstuvwx", "sk-proj-abcdefghij", "api_token"),
    ("export MY_DB_PASSWORD=s3cr3t-value", "s3cr3t-value", "secret_assignment"),
    ("python train.py --hub-token abc123secret --lr 3", "abc123secret", "secret_assignment"),
    ('{"apiKey": "zzz-secret-1"}', "zzz-secret-1", "secret_assignment"),
    ("accessToken=qqq-secret-2 SECRET_KEY_BASE=abc", "qqq-secret-2", "secret_assignment"),
    ("blob Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MEFCQ0RFRkdISUpL end", "Zm9vYmFy", "high_entropy"),
])
def test_token_like_strings_in_log_lines_are_masked(raw: str, secret: str, rule: str) -> None:
    r = Redactor()
    out = r.text(raw)
    assert secret not in out and MASK in out
    assert r.counts[rule] >= 1


@pytest.mark.parametrize("text", [
    "/scratch/projects/dnabert2_ddp_scorep/scorep_rank_0/traces.otf2",
    "ncclKernel_AllReduce_RING_LL_Sum_float",
    "at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>",
    "[CUPTI Activity] Dropped 85222 records. Current buffer size: 1048576 bytes",
    "Proposed minimum SCOREP_CUDA_BUFFER=8889000",
    "scorep-20240101_1200_1234567890123456 and SCOREP_TOTAL_MEMORY=3500M",
    "export SCOREP_CUDA_ENABLE=kernel,memcpy,sync",
    "export HF_TOKEN=$HF_TOKEN",
    "GPU003 fail: cudaGetDeviceCount returned 802 (cudaErrorSystemNotReady)",
    "--max_new_tokens 512 tokenizer_name=bert-base num_tokens: 4096 --max-tokens=8",
    "author: jane; Error: CUDA error; see http://docs.example.org/x",
])
def test_ordinary_diagnostics_survive_redaction(text: str) -> None:
    r = Redactor()
    assert r.text(text) == text


def test_home_folder_and_user_name_are_replaced() -> None:
    r = redactor()
    out = r.text("/home/alice/job/train.py run by alice; /home/bob/x; alicex stays")
    assert out == "~/job/train.py run by <user>; /home/<user>/x; alicex stays"


def test_system_accounts_are_not_personal_data() -> None:
    r = Redactor.for_environments([{"USER": "root", "HOME": "/root"}])
    assert r.text("runs as root in /root/job") == "runs as root in ~/job"


def test_host_names_are_kept_unless_asked() -> None:
    env = {"SLURMD_NODENAME": "gpu07", "SLURM_JOB_NODELIST": "gpu[07-08]"}
    assert Redactor.for_environments([env]).text("on gpu07 and gpu08") == "on gpu07 and gpu08"
    r = Redactor.for_environments([env], hash_hosts=True)
    out = r.text("on gpu07 and gpu08 (gpu070 is another)")
    assert "gpu07 " not in out and "gpu08" not in out and "gpu070" in out
    assert r.environment(env)["SLURM_JOB_NODELIST"].startswith("host-")


def test_slurm_host_lists_expand() -> None:
    assert split_hosts("gpu[01-03,07],login1.cluster.org") == [
        "gpu01", "gpu02", "gpu03", "gpu07", "login1.cluster.org", "login1"]
    assert split_hosts("127.0.0.1,localhost") == []


def test_gpu_uuids_are_hashed_stably_even_without_redaction() -> None:
    uuid = "GPU-2f6a1c3e-1234-5678-9abc-def012345678"
    on, off = Redactor(), Redactor(enabled=False)
    assert on.text(uuid) == off.text(uuid) != uuid
    assert on.text(uuid).startswith("GPU-") and len(on.text(uuid)) == 14


def test_no_redact_keeps_everything_but_uuids() -> None:
    r = Redactor.for_environments([ENV], enabled=False)
    assert r.environment(ENV) == ENV
    assert r.text(f"HF_TOKEN={ENV['HF_TOKEN']}") == f"HF_TOKEN={ENV['HF_TOKEN']}"
    assert r.summary()["enabled"] is False and r.leaked(ENV["HF_TOKEN"]) == []


def test_document_pass_reaches_keys_nested_values_and_environments() -> None:
    r = redactor()
    doc = {"checks": [{"evidence": [{"text": f"token {ENV['HF_TOKEN']}", "file": "/home/alice/job.sh"}]}],
           "/home/alice/logs": {"note": "x"},
           "environment": {"process": dict(ENV), "job": {"OMP_NUM_THREADS": "4", "PATH": "/x"}},
           "data": {"HF_TOKEN": "hf_other_value_not_in_env_123", "count": 3}}
    out = r.document(doc)
    assert out["checks"][0]["evidence"][0] == {"text": f"token {MASK}", "file": "~/job.sh"}
    assert "~/logs" in out
    assert out["environment"]["process"] == {"NCCL_IB_AUTH": MASK, "SCOREP_CUDA_BUFFER": "1M"}
    assert out["environment"]["job"] == {"OMP_NUM_THREADS": "4"}
    assert out["data"] == {"HF_TOKEN": MASK, "count": 3}


def test_objects_that_are_not_json_go_out_redacted_as_text() -> None:
    from pathlib import Path

    out = redactor().document({"data": {"script": Path("/home/alice/train.py"), "n": 3, "ok": None}})
    assert out == {"data": {"script": "~/train.py", "n": 3, "ok": None}}


def test_summary_counts_only_rules_that_fired() -> None:
    r = redactor()
    r.text("https://u:p@h.example/x")
    summary = r.summary()
    assert summary["counts"] == {"url_credentials": 1}
    assert "high_entropy" in summary["rules"]


@pytest.mark.parametrize("token, random", [
    ("Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MEFCQ0RFRkdISUpL", True),
    ("5f0e1d2c3b4a59687766554433221100ffeeddcc", True),
    ("ncclKernel_AllReduce_RING_LL_Sum_float", False),
    ("/home/alice/projects/dnabert2_ddp_scorep/run_1234", False),
    ("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa1", False),
])
def test_looks_random(token: str, random: bool) -> None:
    assert looks_random(token) is random


def test_a_secret_flag_and_its_value_as_separate_argv_items_is_masked() -> None:
    r = redactor()
    doc = r.document({"argv": ["train.py", "--api-key", "plainish123", "-password", "hunter2",
                               "--max_steps", "50", "--key-file", "/etc/k", "--hub_token", "$HF_TOKEN"]})
    assert doc["argv"] == ["train.py", "--api-key", MASK, "-password", MASK,
                           "--max_steps", "50", "--key-file", "/etc/k", "--hub_token", "$HF_TOKEN"]
    assert r.counts["secret_assignment"] == 2
