"""gpu-doctor: find, explain and fix what goes wrong when GPU DDP jobs are measured with Score-P."""

__version__ = "0.1.0"
