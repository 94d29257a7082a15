"""The check catalogue: one module per layer, each check a small pure function over facts."""
