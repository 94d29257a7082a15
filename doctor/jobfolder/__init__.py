"""Read a job folder the way an expert would.

The job folder holds the job and launch scripts (bash, sbatch), the Python
training scripts they run and the local modules those import, the trainer
config files they pass, and so the environment the job will run with.
`discover.load_job(case)` turns it into a `model.Job`: frozen values with a
file and line for everything, which the `job` fact hands to the checks.

Shell is parsed with tree-sitter-bash, Python with `ast`; nothing here runs user code.
"""
