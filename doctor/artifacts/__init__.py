"""What a run left behind: Score-P experiment folders, traces, profiles and logs.

`discover` finds experiment folders, `summary` reads trace and profile
definitions (in a subprocess: the OTF2 C library can abort on bad input),
`logscan` finds known failure signatures in logs, and `facts` exposes them as
the `experiments` and `logscan` facts. Heavy libraries (otf2, pycubexr) are
only imported by the reader child process, never here.
"""
