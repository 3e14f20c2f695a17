"""Where a symlink inside an artifact leads, resolved as the kernel would (pure, no I/O).

A link's target is judged by where it lands, not by how it is spelled: ``d/sub/latest ->
../v2/data.txt`` stays inside ``d`` and is carried; ``d/up -> ../..`` leaves it and is
refused. Spelling alone cannot tell, both ways: ``..`` may stay inside, and a target with no
``..`` may still leave through another link of the archive (``d/x -> .`` then ``d/y ->
x/../..``). So the target is walked component by component, and every component that is
itself a link of the archive is replaced by where that link leads, with ``..`` applied to
the resolved path, as path resolution does. What is not a link of the archive is an
ordinary name (a file or directory of the archive, or nothing yet).

Both sides use it: a push refuses a tree whose links leave it (the pull would refuse them),
and a pull checks every link once the whole archive is known (a later link can change where
an earlier one leads).
"""

from __future__ import annotations

from collections.abc import Mapping

# The kernel gives up (ELOOP) after 40 links in one path resolution; so does this.
MAX_HOPS = 40


class LinkLoop(Exception):
    """Following a link met more than MAX_HOPS links: a loop (or a chain the kernel refuses)."""


def resolve(name: str, links: Mapping[str, str]) -> str | None:
    """Return where the link ``name`` leads, a normalised path relative to the archive's
    top ("." for the top itself), or None when it climbs above the top or is absolute.

    ``links`` maps every link of the archive (normalised member name) to its target as
    written. Raises LinkLoop when the chain of links does not end.
    """
    hops = 0

    def walk(base: list[str], target: str) -> list[str] | None:
        nonlocal hops
        if target.startswith("/"):
            return None
        parts = list(base)
        for component in target.split("/"):
            if component in ("", "."):
                continue
            if component == "..":
                if not parts:
                    return None
                parts.pop()
                continue
            parts.append(component)
            link = links.get("/".join(parts))
            if link is not None:
                hops += 1
                if hops > MAX_HOPS:
                    raise LinkLoop(name)
                resolved = walk(parts[:-1], link)
                if resolved is None:
                    return None
                parts = resolved
        return parts

    found = walk(name.split("/")[:-1], links[name])
    return None if found is None else "/".join(found) or "."


def within(path: str, root: str | None) -> bool:
    """Return True when ``path`` (normalised) is ``root`` or below it; any path is within
    no root (None), except one above the top, which resolve already refused."""
    return root is None or path == root or path.startswith(root + "/")
