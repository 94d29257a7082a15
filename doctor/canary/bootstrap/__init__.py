"""The folder gpu-doctor puts first on the ranks' PYTHONPATH (see doctor.canary)."""
