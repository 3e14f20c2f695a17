"""Ship k8sjobs-maestro.pth at the top of site-packages (see k8sjobs/_maestro_hook.py).

maestrowf 1.2 finds script adapters only inside its own package; the .pth file installs a
lazy import hook that adds k8sjobs' adapter when maestrowf looks. Everything else about the
package is declared in pyproject.toml.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "k8sjobs-maestro.pth"


class BuildPyWithPth(build_py):
    """build_py that also places the .pth file at the root of the wheel."""

    def run(self) -> None:
        super().run()
        target = str(Path(self.build_lib) / PTH)
        self.copy_file(str(Path("k8sjobs") / PTH), target, preserve_mode=False)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / PTH)]


setup(cmdclass={"build_py": BuildPyWithPth})
