"""Why is my job stuck: every rank's stack, the rank that diverged, the collective the others wait in.

- `stacks`: one rank's Python stack, sampled with py-spy (or the reason it could not be).
- `groups`: STAT-style equivalence classes of the ranks' stacks, each stuck or moving.
- `verdict`: the sentence and `hang.json` (`diverged_ranks`, `groups`, `collective`, `verdict`).
- `monitor`: the launch's stall watch (`gpu-doctor launch --stall S`).
- `job`: the sampler on every node of a Slurm job (`srun --overlap --jobid`).
- `flight`: torch's Flight Recorder dumps, matched across ranks the way `fr_trace` does.
- `logs`: the ranks' logs (watchdog timeouts, desync reports, NCCL RAS): ART005's fact.
- `cli`: `gpu-doctor hang`.
"""
