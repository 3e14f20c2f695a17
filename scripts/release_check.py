"""Check a release tag against the package and print what the release workflow publishes.

    python scripts/release_check.py v0.1.0 >> "$GITHUB_OUTPUT"

Prints ``version=`` and ``image=`` lines (the handoff image that render.HANDOFF_IMAGE names,
so the published tag is the one every rendered step pulls). Exits 1 with the reason on
stderr when the tag is not ``v`` followed by the package version.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def package_version() -> str:
    """Return __version__ from k8sjobs/_version.py, read without importing the package."""
    tree = ast.parse((ROOT / "k8sjobs" / "_version.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__version__":
            return str(ast.literal_eval(node.value))
    raise SystemExit("k8sjobs/_version.py does not set __version__")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: release_check.py TAG", file=sys.stderr)
        return 2
    version = package_version()
    if argv[0] != f"v{version}":
        print(
            f'tag "{argv[0]}" does not match the package version {version}: tag the release '
            f'"v{version}", or change k8sjobs/_version.py first',
            file=sys.stderr,
        )
        return 1
    print(f"version={version}")
    print(f"image=ghcr.io/k8sjobs/handoff:{version}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
