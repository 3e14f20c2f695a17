"""``python -m k8sjobs.cli``: the same command as ``k8sjobs``."""

from __future__ import annotations

import sys

from . import main

sys.exit(main())
