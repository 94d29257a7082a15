"""Test-only stand-in for the Score-P Python bindings (see __main__.py)."""
