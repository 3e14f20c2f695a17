"""Make a plain ``maestro run`` find ``batch: type: kubernetes`` (maestrowf 1.2.x).

maestrowf 1.2 has no plugin entry point: ``ScriptAdapterFactory`` lists the modules found on
``maestrowf.interfaces.script.__path__`` and registers every concrete ScriptAdapter in them.
This module adds one directory, ``k8sjobs/maestro/_adapters``, to that ``__path__`` the
moment maestrowf imports the package, and does nothing else:

- ``k8sjobs-maestro.pth`` (installed next to the package, in site-packages, by a wheel or
  an editable install: see setup.py) puts a stand-in
  finder on ``sys.meta_path`` at interpreter start; neither k8sjobs nor maestrowf is
  imported, and every other import is declined by one string comparison. When maestrowf
  imports its script package, the stand-in loads this file by path and calls ``install()``.
- When ``maestrowf.interfaces.script`` is imported, its loader is wrapped so that the
  directory is appended after the package's own code (its ``extend_path``) has run.

This file imports only the standard library; keep it that way.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

__all__ = ["ADAPTER_DIR", "PTH_LINE", "TARGET", "install", "installed", "uninstall"]

TARGET = "maestrowf.interfaces.script"
ADAPTER_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_adapters")
_MARK = "_k8sjobs_maestro_hook"

# What ``k8sjobs-maestro.pth`` runs at interpreter start: a stand-in finder that waits for
# maestrowf to import TARGET, then finds k8sjobs (without importing it), runs this file and
# hands over to install(). Looking k8sjobs up only then makes the order in which site
# directories and their .pth files are processed irrelevant. Standard library only, and
# a broken or removed k8sjobs must never stop Python or Maestro: errors are reported.
_BOOTSTRAP = """\
class _K8sjobsMaestroBootstrap:
    _k8sjobs_maestro_hook = True

    def find_spec(self, name, path, target=None):
        if name != "maestrowf.interfaces.script":
            return None
        import sys
        from importlib.util import find_spec, module_from_spec, spec_from_file_location
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        try:
            found = find_spec("k8sjobs")
            where = found and found.submodule_search_locations
            if not where:
                return None
            spec = spec_from_file_location("_k8sjobs_maestro_hook", where[0] + "/maestro/_hook.py")
            module = module_from_spec(spec)
            spec.loader.exec_module(module)
            module.install()
            return module._FINDER.find_spec(name, path, target)
        except Exception as exc:
            sys.stderr.write("k8sjobs-maestro.pth: %s\\n" % (exc,))
            return None

import sys
# A site directory may be processed twice (lib and a lib64 link to it): install once.
if not any(getattr(f, "_k8sjobs_maestro_hook", False) for f in sys.meta_path):
    sys.meta_path.insert(0, _K8sjobsMaestroBootstrap())
"""

#: The one line of ``k8sjobs-maestro.pth`` (site runs lines that start with "import").
PTH_LINE = f"import sys; exec({_BOOTSTRAP!r})\n"


class _AppendingLoader(importlib.abc.Loader):
    """Run the real loader, then append ADAPTER_DIR to the package's ``__path__``."""

    def __init__(self, inner: importlib.abc.Loader) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        # get_filename, is_package, get_code...: pkgutil and importlib ask the loader.
        return getattr(self._inner, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        path = getattr(module, "__path__", None)
        if isinstance(path, list) and ADAPTER_DIR not in path:
            path.append(ADAPTER_DIR)


class _Finder(importlib.abc.MetaPathFinder):
    """Find ``maestrowf.interfaces.script`` with the other finders and wrap its loader."""

    _k8sjobs_maestro_hook = True

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != TARGET:
            return None
        for finder in sys.meta_path:
            if getattr(finder, _MARK, False) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _AppendingLoader(spec.loader)
                return spec
        return None


def installed() -> bool:
    """Return whether a hook (from this file or another copy of it) is on sys.meta_path."""
    return any(getattr(finder, _MARK, False) for finder in sys.meta_path)


_FINDER = _Finder()


def install() -> None:
    """Put the hook on ``sys.meta_path`` (once); if maestrowf's package is loaded, extend it now."""
    if not installed():
        sys.meta_path.insert(0, _FINDER)
    loaded = sys.modules.get(TARGET)
    path = getattr(loaded, "__path__", None)
    if isinstance(path, list) and ADAPTER_DIR not in path:
        path.append(ADAPTER_DIR)


def uninstall() -> None:
    """Take the hook off ``sys.meta_path`` (for tests)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, _MARK, False)]
