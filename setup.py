"""Ship k8sjobs-maestro.pth at the top of site-packages (see k8sjobs/maestro/_hook.py).

maestrowf 1.2 finds script adapters only inside its own package; the .pth file installs a
lazy import hook that adds k8sjobs' adapter when maestrowf looks. A wheel carries the file
at its root, from build_lib. An editable install (``pip install -e``, PEP 660) does not
install build_lib: setuptools' ``editable_wheel`` points ``install_lib`` at the wheel it is
packing and packs every file found there, so in editable mode the file goes there instead.
Everything else about the package is declared in pyproject.toml.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "k8sjobs-maestro.pth"
SOURCE = Path("k8sjobs") / "maestro" / PTH


class BuildPyWithPth(build_py):
    """build_py that also places the .pth file at the root of the (editable) wheel."""

    def run(self) -> None:
        super().run()
        self.copy_file(str(SOURCE), self._pth_target(), preserve_mode=False)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), self._pth_target()]

    def _pth_target(self) -> str:
        if getattr(self, "editable_mode", False):
            # The root of the editable wheel being packed (editable_wheel sets it so).
            root = self.get_finalized_command("install").install_lib
        else:
            root = self.build_lib
        return str(Path(root) / PTH)


setup(cmdclass={"build_py": BuildPyWithPth})
