"""Remedies: one module per family; plan -> preview -> apply -> verify -> undo."""
