"""Read a job folder the way an expert would: one job model for checks and remedies.

The job folder holds the job and launch scripts (bash, sbatch), the Python
training scripts they run and the local modules those import, the trainer
config files they pass, and so the environment the job will run with.
`discover.load_job(case)` turns it into a `model.Job`: frozen values with a
file and line for everything (and for every shell word, its character span),
which the `job` fact hands to the checks and `doctor.remedy.spans` to the remedies.

Shell: `syntax` (tree-sitter-bash trees), `walker` with `state`, `links` (scripts a
script runs, sources, wrapper scripts torchrun starts, `-m pkg.mod`), `loops`,
`recovery` (lines the parser cannot read), `expand` (word expansion with the origin
of every character) and `arith`; `argv` (what a command line starts), `sbatch`.
Python: `pyscan` (`ast`). Then `queries` (what checks ask), `processes` (the tree
`--json` prints as `job.processes`), `scorep_values` (Score-P's own parsing, and the
one owner of each value gpu-doctor proposes). Nothing here runs user code.
"""
