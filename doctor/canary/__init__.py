"""The replica canary: `gpu-doctor launch --canary K` checks that DDP's replicas stay bit-identical.

DDP's invariant is free to check: after every optimizer step every rank holds the same
parameters. Every K steps each rank hashes its DistributedDataParallel parameters on their
own device into an 8-byte digest; the ranks compare digests with one tiny all_gather on a
gloo group of their own, and on a mismatch a second round of per-tensor digests names the
first tensor that differs and the minority rank(s).

Two halves:

- rank side, `bootstrap/`: a folder put first on the ranks' PYTHONPATH. Its
  `sitecustomize` (which runs the user's own sitecustomize too) waits for `import torch`
  and registers torch's global optimizer step post-hook. It imports nothing of gpu-doctor:
  the job's interpreter may not have gpu-doctor installed.
- launcher side (`launch.py`, `report.py`): the ranks' environment, the live line, and
  `canary.json` in the run folder with the summary's lines.
"""
