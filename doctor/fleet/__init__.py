"""The admin's view across the cluster: `gpu-doctor fleet DIR...`.

The Prolog (doctor/slurm/prolog.sh) leaves one gate document per run in its verdict folder;
`history` streams them into small `Verdict` records, `analysis` turns those into per-node
histories, lemon nodes, flapping checks and an exclude list, `hostlist` writes node names in
Slurm's hostlist syntax, and `drains` reads Slurm's own drain reasons beside ours.
"""
