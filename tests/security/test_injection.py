"""Hostile names, env values and paths cannot change what runs: they arrive byte-exact.

Each hostile value carries every way text becomes a command in a shell or in Kubernetes:
quotes, ``$(...)``, backticks, ``;``, newlines, ``$(VAR)`` references and ``$$``. The pods
are rendered by ``render`` and run by the local pod runner (real processes, real /bin/sh
for the exit-code wrapper, the real handoff for outputs) or by a local Session; a canary
file that any of the payloads would create must never appear.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr, ValidationError

from k8sjobs.local import LocalBackend
from k8sjobs.local.podrunner import PodRunner
from k8sjobs.render.manifests import Manifests, Target
from k8sjobs.render.manifests import render as render_any
from k8sjobs.render.sshkey import generate_key
from k8sjobs.session import Session
from k8sjobs.steps.spec import Step

# Multi-node steps are launched over ssh: they render with a key pair.
render = partial(render_any, ssh_key=generate_key())

DUMP = """\
import json, os, pathlib
work = pathlib.Path(os.environ["K8SJOBS_WORKDIR"])
(work / "env.json").write_text(json.dumps(dict(os.environ)))
for rel in json.loads(os.environ["MAKE_FILES"]):
    path = work / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("made")
"""


def payloads(canary: Path) -> list[str]:
    """Return strings that create ``canary`` if any shell or expansion interprets them."""
    c = str(canary)
    return [
        f"$(touch {c})",
        f"`touch {c}`",
        f"; touch {c}",
        f"'; touch {c}; '",
        f'"; touch {c}; "',
        f"\ntouch {c}\n",
        f"&& touch {c} ||",
        f"| touch {c}",
        "$(K8SJOBS_STEP) $(HOME) $$ $$(HOME) ${HOME} $",
        "\\\" \\' \\n",
    ]


async def _run(
    manifests: Manifests, tmp_path: Path, secrets: Mapping[str, Mapping[str, bytes]] = {}
) -> tuple[dict[str, Any], Path]:
    """Run the step's pod through the local pod runner; return its status and work dir."""
    runner = PodRunner(tmp_path / "pods", kill_grace=1.0)
    template = manifests.job["spec"]["template"]
    meta = {**template["metadata"], "name": "hostile-0-abcde", "namespace": "default"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]}
    configmaps = {manifests.name: manifests.configmap["data"]}
    stored = dict(secrets)
    if manifests.secret is not None:
        data = manifests.secret["data"]
        stored[manifests.name] = {k: base64.b64decode(v) for k, v in data.items()}
    status = await runner.run(
        pod,
        configmap=configmaps.__getitem__,
        secret=lambda name: dict(stored[name]),
        on_status=lambda _status: None,
    )
    return status, runner.sandbox("default", meta["name"]) / "volumes" / "work"


def _log(tmp_path: Path, container: str) -> str:
    path = tmp_path / "pods" / "default" / "hostile-0-abcde" / "logs" / f"{container}.log"
    return path.read_text() if path.exists() else ""


@pytest.mark.parametrize("outputs", [False, True], ids=["plain", "with-outputs"])
async def test_hostile_names_env_values_and_paths_arrive_byte_exact(
    tmp_path: Path, outputs: bool
) -> None:
    canary = tmp_path / "canary"
    hostile = payloads(canary)
    one_line = [p for p in hostile if "\n" not in p]
    name = f"s{one_line[0]}'\"{one_line[1]}$(K8SJOBS_STUDY)$$"
    study = "study " + one_line[0] + one_line[1]
    env: dict[str, Any] = {f"V{i}": value for i, value in enumerate(hostile)}
    env["SECRET"] = SecretStr("".join(hostile))
    # Output paths: any text a relative path may hold, shell syntax included.
    out_paths = {"odd": "out/we'i\"rd $(touch x) `y`; z.txt", "dir": "d|&;<>*?[a]/f"}
    env["MAKE_FILES"] = json.dumps(list(out_paths.values()))
    step = Step(
        name=name,
        script=DUMP,
        shell="python",
        env=env,
        workdir=f'/work/it\'s "odd" $(touch {canary}) `touch {canary}`',
        outputs=out_paths if outputs else {},
    )
    target = Target(study=study, store=f"oci:{tmp_path / 'layout'}" if outputs else None)
    manifests = render(step, target)
    status, work = await _run(manifests, tmp_path)
    assert status["phase"] == "Succeeded", (status, _log(tmp_path, "step"))
    assert not canary.exists()
    seen = json.loads((work / "env.json").read_text())
    for i, value in enumerate(hostile):
        assert seen[f"V{i}"] == value
    assert seen["SECRET"] == "".join(hostile)
    assert seen["K8SJOBS_STEP"] == name
    assert seen["K8SJOBS_STUDY"] == study
    assert seen["K8SJOBS_WORKDIR"] == str(work)
    for rel in out_paths.values():
        assert (work / rel).read_text() == "made"
    if outputs:
        pushed = _log(tmp_path, "k8sjobs-push")
        assert all(key in pushed for key in out_paths), pushed


def test_scripts_never_travel_on_a_command_line() -> None:
    canary = "UNIQUE-SCRIPT-TEXT-8d1f"
    step = Step(name="s", script=f"echo {canary}", outputs={"o": "o"})
    manifests = render(step, Target(store="oci:/a"))
    spec = manifests.job["spec"]["template"]["spec"]
    for container in spec.get("initContainers", []) + spec["containers"]:
        argv = container.get("command", []) + container.get("args", [])
        assert not any(canary in arg for arg in argv)
        assert not any(canary in e.get("value", "") for e in container["env"])
    assert canary in manifests.configmap["data"]["entrypoint"]


def test_the_exit_code_wrapper_is_fixed_text() -> None:
    """Whatever the step, the wrapper script is the same bytes: nothing is spliced into it."""
    plain = render(Step(name="a", script="x", outputs={"o": "o"}), Target(store="oci:/a"))
    hostile = Step(
        name="b $(x) `y`",
        script="$(LAUNCHER) `x` '",
        shell="/bin/bash -e",
        outputs={"o": "o'$(x)`y`"},
        env={"E": "$(x)"},
    )
    other = render(hostile, Target(store="oci:/a", study="s $(z)"))
    assert plain.configmap["data"]["run"] == other.configmap["data"]["run"]


@pytest.mark.parametrize(
    "name",
    ["../up", "a/b", "$(x)", "`x`", "a b", "a;b", "a\nb", "A", ".hidden", "", "-flag"],
)
def test_input_and_output_names_are_plain_file_names(name: str) -> None:
    with pytest.raises(ValidationError):
        Step(name="s", script="x", inputs={name: "registry.example/x:1"})
    with pytest.raises(ValidationError):
        Step(name="s", script="x", outputs={name: "out"})


@pytest.mark.parametrize("path", ["/etc/passwd", "..", "../x", "a/../../x", "./../x", "", "/"])
def test_output_paths_stay_inside_the_work_directory(path: str) -> None:
    with pytest.raises(ValidationError, match="inside the work directory"):
        Step(name="s", script="x", outputs={"o": path})


def test_output_paths_are_normalised_before_they_leave_the_spec() -> None:
    step = Step(name="s", script="x", outputs={"o": "a/./b/../c"})
    assert step.outputs["o"] == "a/c"


@pytest.mark.parametrize("reference", ["a b", "x:1\n--config=/etc/x", "", " "])
def test_input_references_cannot_hold_white_space(reference: str) -> None:
    with pytest.raises(ValidationError):
        Step(name="s", script="x", inputs={"i": reference})


def test_step_names_must_be_one_line() -> None:
    for name in ("a\nb", "a\rb", "a\0b", "   "):
        with pytest.raises(ValidationError):
            Step(name=name, script="x")


async def test_hostile_input_reference_reaches_the_handoff_as_data(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    reference = f"k8sjobs/x:$(touch${{IFS}}{canary})`touch${{IFS}}{canary}`"
    with pytest.raises(ValidationError, match="not an artifact reference"):
        Step(name="s", script="true", shell="sh", inputs={"i": reference})
    # Refused up front; a Step built around validation still carries it only as data.
    fields = {**Step(name="s", script="true", shell="sh").__dict__, "inputs": {"i": reference}}
    step = Step.model_construct(**fields)
    manifests = render(step, Target(store=f"oci:{tmp_path / 'layout'}"))
    assert json.loads(manifests.configmap["data"]["handoff.json"])["inputs"] == {"i": reference}
    status, _work = await _run(manifests, tmp_path)
    assert status["phase"] == "Failed"  # no such artifact: the pull fails, nothing runs
    assert not canary.exists()


async def test_hostile_values_through_a_local_session(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    hostile = payloads(canary)
    dump = tmp_path / "env.json"
    script = f"import json, os; open({str(dump)!r}, 'w').write(json.dumps(dict(os.environ)))"
    env: dict[str, Any] = {f"V{i}": value for i, value in enumerate(hostile)}
    env["SECRET"] = SecretStr(hostile[0] + hostile[5])
    name = f"local {hostile[1]}{hostile[3]}"
    backend = LocalBackend(state_dir=tmp_path / "state", cpu=2, kill_grace=1.0)
    async with Session(study=f"st {hostile[0]}", backend=backend) as session:
        handle = await session.submit(Step(name=name, script=script, shell="python", env=env))
        result = await handle.wait(60)
    assert result.ok, result.describe()
    assert not canary.exists()
    seen = json.loads(dump.read_text())
    assert [seen[f"V{i}"] for i in range(len(hostile))] == hostile
    assert seen["SECRET"] == hostile[0] + hostile[5]
    assert seen["K8SJOBS_STEP"] == name
