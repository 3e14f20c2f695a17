"""Entry point of the handoff image: ``python -m k8sjobs.handoff pull|push --config F``.

A thin wrapper; the logic lives in k8sjobs.artifacts.handoff.
"""

from __future__ import annotations

from .artifacts.handoff import main

if __name__ == "__main__":
    raise SystemExit(main())
