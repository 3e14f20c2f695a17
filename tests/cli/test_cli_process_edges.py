"""The command as a process meets its edges: a reader that leaves, Ctrl-C at any moment,
and the cheap questions (``--version``) that must not load the whole program.

Each test runs ``python -m k8sjobs.cli`` (or the entry point) in a real subprocess, because
these are facts about the process: its exit code, its stderr, what it imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from k8sjobs.cli.main import build_parser
from k8sjobs.cli.reference import commands

# What the cheap questions (--version, --help) must not load: the libraries (most of a
# second), and the modules of the library that import them.
_HEAVY = (
    *("rich", "pydantic", "yaml", "aiohttp", "httpx", "kubernetes_asyncio", "cryptography"),
    *("k8sjobs.session", "k8sjobs.study", "k8sjobs.render", "k8sjobs.artifacts"),
)
# Print, after running the command line, the heavy modules it imported (each of _HEAVY
# given as an argument, with its submodules).
_IMPORTED_HEAVY = """
import sys
from k8sjobs.cli import main
try:
    code = main({argv!r})
except SystemExit as exc:  # --help, and argparse's usage errors
    code = exc.code
sys.stdout.flush()
heavy = sorted({{h for h in sys.argv[1:] for m in sys.modules if (m + ".").startswith(h + ".")}})
print(code, heavy)
"""


def _help_commands() -> list[list[str]]:
    """Return every command and group of the parser (the parser itself: ``[]``), so that a
    new one is covered."""
    found = {words[:n] for words, _ in commands(build_parser()) for n in range(len(words) + 1)}
    return [list(words) for words in sorted(found)]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}


def _big_study(folder: Path) -> Path:
    values = ", ".join(str(i) for i in range(400))
    path = folder / "big.yaml"
    path.write_text(
        f"name: big\nsteps:\n  - name: s\n    parameters: {{N: [{values}]}}\n    script: echo $N\n"
    )
    return path


def _run_small_study(folder: Path) -> Path:
    path = folder / "small.yaml"
    path.write_text("name: small\nsteps:\n  - name: a\n    script: seq 1 50\n")
    subprocess.run(
        [sys.executable, "-m", "k8sjobs.cli", "--state-dir", str(folder), "run", str(path)],
        capture_output=True,
        env=_env(),
        timeout=300,
        check=True,
    )
    return path


def _into_closed_pipe(state: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``k8sjobs ARGV`` with stdout a pipe whose reader is already gone, so the first
    write fails whatever the size of the machine's pipe buffer (a reader that leaves later
    can find the output already buffered)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "k8sjobs.cli", "--state-dir", str(state), *argv],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
            timeout=300,
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize(
    "command",
    [
        ["render", "{big}", "--registry", "oci:/r"],
        ["status", "{small}"],
        ["status", "{small}", "-o", "json"],
        ["run", "{small}"],
        ["logs", "--study", "small", "a"],
        ["rbac", "--namespace", "n"],
        ["report", "small", "-o", "/dev/stdout"],
        ["report", "small", "-o", "-"],
        ["--help"],
        ["run", "--help"],
    ],
    ids=[
        "render",
        "status",
        "status-json",
        "run",
        "logs",
        "rbac",
        "report-stdout",
        "report-dash",
        "help",
        "run-help",
    ],
)
def test_a_reader_that_closed_the_pipe_ends_any_printing_command_quietly(
    tmp_path: Path, command: list[str]
) -> None:
    """``k8sjobs CMD | head -1``: the command stops at the closed pipe with no message and
    exit 141 (a SIGPIPE death, as ``cat``), never "error: [Errno 32] Broken pipe" (exit 2)."""
    names = {"{big}": str(_big_study(tmp_path))}
    if any("small" in part for part in command):
        names["{small}"] = str(_run_small_study(tmp_path))
    argv = [names.get(part, part) for part in command]
    done = _into_closed_pipe(tmp_path, argv)
    assert done.stderr == ""
    # argparse's help drops the write and exits 0: quiet too. rich's tables (status, run)
    # once ended with rich's own exit 1, as if a step had failed.
    allowed = (0, 141) if command[-1] == "--help" else (141,)
    assert done.returncode in allowed, done.returncode


# What a command loads inside main(), where a Ctrl-C is caught: --help only the parser's.
_PARSER_MODULES = ("argparse", "k8sjobs.cli.main", "k8sjobs.cli.studyargs")
_COMMAND_MODULES = (
    "k8sjobs.cli.studies",
    "rich",
    "pydantic",
    "yaml",
    "k8sjobs.study",
    "k8sjobs.render",
)


@pytest.mark.parametrize(
    ("command", "module"),
    [
        *((["--help"], module) for module in _PARSER_MODULES),
        *(
            (command, module)
            for command in (["status", "s.yaml"], ["run", "s.yaml"])
            for module in _COMMAND_MODULES
        ),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else value,
)
def test_ctrl_c_while_any_module_loads_is_one_line_and_exit_130(
    module: str, command: list[str]
) -> None:
    """Ctrl-C arrives as KeyboardInterrupt at whatever the process does; the earliest moment
    is the import of the commands' modules. An import hook raises it at ``module``'s import,
    the way a real SIGINT would there (a module the command does not load would leave it
    ending as usual: no 130)."""
    program = textwrap.dedent(
        f"""
        import sys
        class Interrupt:
            def find_spec(self, name, path=None, target=None):
                if name == {module!r}:
                    raise KeyboardInterrupt
                return None
        sys.meta_path.insert(0, Interrupt())
        from k8sjobs.cli import main
        sys.exit(main({command!r}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, env=_env(), timeout=300
    )
    assert done.returncode == 130, done.stderr
    assert done.stderr.splitlines() == ["interrupted (Ctrl-C)"], done.stderr


def _imported_heavy(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _IMPORTED_HEAVY.format(argv=argv), *_HEAVY],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
    )


def test_version_imports_none_of_the_heavy_libraries() -> None:
    done = _imported_heavy(["--version"])
    assert done.stdout.splitlines()[-1] == "0 []", done.stdout + done.stderr
    assert done.stdout.startswith("k8sjobs "), done.stdout


@pytest.mark.parametrize(
    "command", _help_commands(), ids=lambda words: " ".join(words) or "k8sjobs"
)
def test_help_imports_none_of_the_heavy_libraries(command: list[str]) -> None:
    """``k8sjobs [CMD] --help`` builds the whole parser and prints; the commands' modules
    (rich, pydantic, yaml, the artifact stack) load only when a command runs."""
    for flag in ("--help", "-h"):
        done = _imported_heavy([*command, flag])
        assert done.stdout.splitlines()[-1] == "0 []", done.stdout + done.stderr
        assert "usage: k8sjobs" in done.stdout, done.stdout


def test_no_command_is_a_usage_error_that_imports_none_of_the_heavy_libraries() -> None:
    done = _imported_heavy([])
    assert done.stdout.splitlines()[-1] == "2 []", done.stdout + done.stderr
    assert done.stderr.startswith("error: k8sjobs: the following arguments are required")


def test_a_reader_that_left_stops_a_run_as_ctrl_c_does(tmp_path: Path) -> None:
    """``k8sjobs run study.yaml | head -1``: the run ends with 141 and its steps are cancelled
    and recorded so. A driver that died of the closed pipe (rich's exit 1, or the pipe's
    error in a step's listener) left a running step LOST and a quick one never ended."""
    study = tmp_path / "long.yaml"
    study.write_text(
        "name: long\nsteps:\n  - name: slow\n    script: sleep 600\n"
        "  - name: quick\n    script: echo hi\n"
    )
    done = _into_closed_pipe(tmp_path, ["run", str(study)])
    assert (done.returncode, done.stderr) == (141, "")
    cli = [sys.executable, "-m", "k8sjobs.cli", "--state-dir", str(tmp_path)]
    status = subprocess.run(
        [*cli, "status", str(study), "-o", "json"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
    )
    states = {s["name"]: s["state"] for s in json.loads(status.stdout)["steps"]}
    assert states["slow"] == "CANCELLED", status.stdout
    assert states["quick"] in {"CANCELLED", "SUCCEEDED"}, status.stdout


@pytest.mark.parametrize(
    ("closed", "command", "code"),
    [
        (1, ["status", "{small}"], 0),
        (1, ["status", "{small}", "-o", "yaml"], 0),
        (1, ["rbac", "--namespace", "n"], 0),
        (1, ["run", "{small}"], 0),
        (2, ["status", "{small}"], 0),
        (2, ["bogus"], 2),
        (0, ["status", "{small}"], 0),
    ],
    ids=[
        "stdout-status",
        "stdout-yaml",
        "stdout-rbac",
        "stdout-run",
        "stderr",
        "stderr-usage",
        "stdin",
    ],
)
def test_a_standard_stream_the_caller_closed_is_no_traceback(
    tmp_path: Path, closed: int, command: list[str], code: int
) -> None:
    """``k8sjobs status >&-`` (or ``2>&-``, ``<&-``): Python starts with that stream None;
    every command ended in an AttributeError traceback and exit 1 (the parser itself asked
    ``sys.stderr.isatty()``). What would be written there is dropped, the code is the
    command's own."""
    small = str(_run_small_study(tmp_path))
    argv = [small if part == "{small}" else part for part in command]
    shell = ["sh", "-c", f'exec "$@" {closed}>&-', "sh"]
    done = subprocess.run(
        [*shell, sys.executable, "-m", "k8sjobs.cli", "--state-dir", str(tmp_path), *argv],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
    )
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
