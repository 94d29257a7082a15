"""Bundled TOML playbooks (data only)."""
