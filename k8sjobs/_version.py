"""The package version: the one place it is written (pyproject, the handoff image tag and the
release workflow all read it from here)."""

__version__ = "0.1.0"
