"""Step and Resources: bad input is refused with the field and the fix; good forms pass."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import SecretStr, ValidationError

from k8sjobs.artifacts import parse_reference
from k8sjobs.render.manifests import Target, render
from k8sjobs.steps.spec import (
    ANNOTATIONS_LIMIT,
    SCRIPT_LIMIT,
    Resources,
    SecretKeyRef,
    Step,
    Toleration,
    find_launcher_calls,
    parse_duration,
    parse_quantity,
)

from ..fuzz_values import any_values


def step(**fields: Any) -> Step:
    fields.setdefault("name", "train")
    fields.setdefault("script", "echo hi\n")
    return Step(**fields)


def refused(make: Any, loc: tuple[str | int, ...], *fix: str) -> str:
    """Assert ``make()`` fails at ``loc`` alone, with every ``fix`` phrase in its message."""
    with pytest.raises(ValidationError) as caught:
        make()
    errors = caught.value.errors()
    assert [e["loc"] for e in errors] == [loc], errors
    text = str(caught.value)
    assert ".".join(map(str, loc)) in text
    for phrase in fix:
        assert phrase in errors[0]["msg"], errors[0]["msg"]
    return str(errors[0]["msg"])


# --- resources ---------------------------------------------------------------------------


def test_unparseable_memory_names_field_and_fix() -> None:
    refused(
        lambda: step(resources={"memory": "12 gigs"}),
        ("resources", "memory"),
        '"12 gigs"',
        '"12Gi"',
        "number of bytes",
    )


@pytest.mark.parametrize("memory", ["0", 0, "0Gi"])
def test_zero_memory_is_refused(memory: str | int) -> None:
    refused(lambda: step(resources={"memory": memory}), ("resources", "memory"), "zero")


def test_negative_memory_is_refused() -> None:
    refused(lambda: Resources(memory=-1), ("memory",), "not a quantity")


@pytest.mark.parametrize("field", ["nodes", "tasks", "cores_per_task"])
@pytest.mark.parametrize("count", [0, -1])
def test_counts_below_one_are_refused(field: str, count: int) -> None:
    refused(lambda: step(resources={field: count}), ("resources", field), "greater than 0")


def test_negative_gpus_are_refused() -> None:
    refused(lambda: step(resources={"gpus": -1}), ("resources", "gpus"), "greater than or equal")


def test_fewer_tasks_than_nodes_is_refused_at_tasks() -> None:
    refused(
        lambda: step(resources={"nodes": 4, "tasks": 2}),
        ("resources", "tasks"),
        "raise tasks or lower nodes",
    )


@pytest.mark.parametrize(
    "name", ["gpu", "cpu", "memory", "kubernetes.io/gpu", "requests.example.com/gpu"]
)
def test_gpu_resource_must_be_an_extended_resource(name: str) -> None:
    refused(lambda: Resources(gpus=1, gpu_resource=name), ("gpu_resource",), "nvidia.com/gpu")


@pytest.mark.parametrize(
    ("quantity", "size"),
    [
        ("4Gi", 4 * 2**30),
        ("500M", 500 * 10**6),
        ("1.5Gi", 3 * 2**29),
        ("1e9", 10**9),
        (2**20, 2**20),
        ("128Mi", 128 * 2**20),
        ("2k", 2000),
        ("1E", 10**18),
    ],
)
def test_quantities_are_understood(quantity: str | int, size: int) -> None:
    assert parse_quantity(quantity) == size
    assert step(resources={"memory": quantity}).resources.memory_bytes == size


@pytest.mark.parametrize("bad", ["12 gigs", "4GB", "1m", "Gi", "", "-1Gi", "4 Gi x"])
def test_bad_quantities_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        parse_quantity(bad)


def test_maestro_aliases_procs_and_cores_per_task() -> None:
    res = Resources.model_validate({"procs": 8, "cores per task": 2, "nodes": 2})
    assert (res.tasks, res.cores_per_task, res.nodes) == (8, 2, 2)
    assert (res.tasks_per_node, res.cpu_per_node) == (4, 8)
    assert Resources(tasks=3, cores_per_task=4) == Resources.model_validate(
        {"procs": 3, "cores_per_task": 4}
    )


def test_uneven_tasks_round_up_per_node() -> None:
    res = Resources(nodes=2, tasks=5)
    assert (res.tasks_per_node, res.cpu_per_node) == (3, 3)


# --- unknown fields ----------------------------------------------------------------------


def test_typo_in_step_field_is_refused_with_suggestion() -> None:
    refused(
        lambda: step(resource={"nodes": 2}),
        ("resource",),
        '"resource" is not a field of Step',
        'did you mean "resources"?',
    )


def test_typo_in_resources_field_is_refused_with_suggestion() -> None:
    refused(lambda: Resources(cpus=2), ("cpus",), "did you mean")  # type: ignore[call-arg]
    refused(lambda: step(resources={"cpus": 2}), ("resources", "cpus"), "did you mean")


def test_unrelated_unknown_field_lists_known_fields() -> None:
    msg = refused(lambda: step(flavour="vanilla"), ("flavour",), "known fields:")
    assert "resources" in msg and "walltime" in msg


# --- shell -------------------------------------------------------------------------------


@pytest.mark.parametrize("shell", ["fish", "bin/bash", "", "   ", "./run.sh"])
def test_shell_neither_absolute_nor_known_is_refused(shell: str) -> None:
    refused(lambda: step(shell=shell), ("shell",), "absolute path", "bash")


@pytest.mark.parametrize(
    ("shell", "argv"),
    [
        ("bash", ("/bin/bash",)),
        ("sh", ("/bin/sh",)),
        ("python", ("python3",)),
        ("/usr/bin/env python3", ("/usr/bin/env", "python3")),
        ("/bin/bash -eu", ("/bin/bash", "-eu")),
        ("/opt/conda/bin/python", ("/opt/conda/bin/python",)),
    ],
)
def test_known_and_absolute_shells_give_argv(shell: str, argv: tuple[str, ...]) -> None:
    assert step(shell=shell).argv == argv


def test_default_shell_is_bash() -> None:
    assert step().argv == ("/bin/bash",)


# --- script and launcher -----------------------------------------------------------------


def test_script_over_configmap_limit_is_refused() -> None:
    refused(
        lambda: step(script="x" * (SCRIPT_LIMIT + 1)),
        ("script",),
        "limit of a ConfigMap",
        "in the image or as an input artifact",
    )
    assert step(script="x" * SCRIPT_LIMIT)


def test_script_size_counts_bytes_not_characters() -> None:
    refused(lambda: step(script="é" * (SCRIPT_LIMIT // 2 + 1)), ("script",), "bytes")


def test_empty_script_is_refused() -> None:
    refused(lambda: step(script=""), ("script",))


def test_launcher_asking_more_procs_than_tasks_is_refused() -> None:
    refused(
        lambda: step(script="$(LAUNCHER)[16p] ./a.out", resources={"tasks": 8}),
        ("script",),
        "$(LAUNCHER)[16p]",
        "resources.tasks is 8",
        "raise resources.tasks or lower the count",
    )


def test_launcher_asking_more_nodes_than_nodes_is_refused() -> None:
    refused(
        lambda: step(script="$(LAUNCHER)[4n] ./a.out", resources={"tasks": 8, "nodes": 2}),
        ("script",),
        "resources.nodes is 2",
        "raise resources.nodes",
    )


def test_launcher_oversubscribing_a_node_is_refused() -> None:
    refused(
        lambda: step(script="$(LAUNCHER)[1n, 8p] x", resources={"tasks": 8, "nodes": 2}),
        ("script",),
        "room for 4 tasks",
        "$(LAUNCHER)[2n, 8p]",
    )


@pytest.mark.parametrize("call", ["$(LAUNCHER)[0p]", "$(LAUNCHER)[4x]", "$(LAUNCHER)[p]"])
def test_malformed_launcher_is_refused_at_script(call: str) -> None:
    refused(lambda: step(script=call, resources={"tasks": 8}), ("script",), "$(LAUNCHER)[4p]")


def test_launcher_calls_are_found_with_counts() -> None:
    calls = find_launcher_calls("$(LAUNCHER) a\n$(LAUNCHER)[4p] b\n$(LAUNCHER)[2n, 8p] c")
    assert [(c.nodes, c.procs) for c in calls] == [(None, None), (None, 4), (2, 8)]


def test_launcher_template_with_unknown_field_is_refused() -> None:
    refused(lambda: step(launcher="srun -n {ntasks}"), ("launcher",), "{procs}")


# --- image, env, labels, names -----------------------------------------------------------


@pytest.mark.parametrize("image", ["", "  "])
def test_empty_image_is_refused(image: str) -> None:
    refused(lambda: step(image=image), ("image",), "python:3.12-slim")


def test_image_with_space_is_refused() -> None:
    refused(lambda: step(image="python 3"), ("image",), "white space")


@pytest.mark.parametrize("name", ["1A", "A=B", "A B", ""])
def test_bad_env_names_are_refused(name: str) -> None:
    refused(lambda: step(env={name: "x"}), ("env",), "not a valid environment variable name")


def test_reserved_env_names_are_refused() -> None:
    refused(lambda: step(env={"K8SJOBS_WORKDIR": "/x"}), ("env",), "set by k8sjobs")


def test_env_values_may_be_text_secret_or_secret_ref() -> None:
    env = step(
        env={
            "PLAIN": "1",
            "TOKEN": SecretStr("s3cret"),
            "DB": {"secret": "db-creds", "key": "password"},
        }
    ).env
    assert env["PLAIN"] == "1"
    assert isinstance(env["TOKEN"], SecretStr)
    assert env["DB"] == SecretKeyRef(secret="db-creds", key="password")


def test_bad_secret_ref_name_is_refused() -> None:
    with pytest.raises(ValidationError, match="not a valid Secret name"):
        step(env={"DB": SecretKeyRef(secret="Bad_Name", key="k")})


@pytest.mark.parametrize("key", ["bad key", "-a", "a" * 64, "Bad_Prefix/a", "x/"])
def test_bad_label_keys_are_refused(key: str) -> None:
    refused(lambda: step(labels={key: "v"}), ("labels",), key)


@pytest.mark.parametrize("value", ["bad value", "-a", "a" * 64, "a/b"])
def test_bad_label_values_are_refused(value: str) -> None:
    refused(lambda: step(labels={"team": value}), ("labels",), "at most 63 characters")


@pytest.mark.parametrize("field", ["labels", "annotations", "node_selector"])
def test_reserved_label_prefix_is_refused(field: str) -> None:
    refused(lambda: step(**{field: {"k8sjobs.io/step": "x"}}), (field,), "reserved")


def test_good_labels_pass() -> None:
    s = step(labels={"team": "ml", "example.com/run": "A_1.b", "empty": ""})
    assert s.labels["example.com/run"] == "A_1.b"


@pytest.mark.parametrize("namespace", ["Bad", "a_b", "-a", "a" * 64, ""])
def test_bad_namespace_is_refused(namespace: str) -> None:
    refused(lambda: step(namespace=namespace), ("namespace",), "lowercase letters")


@pytest.mark.parametrize(
    ("field", "words"),
    [
        ("queue", "not a valid LocalQueue name"),  # a label value too: 63 characters at most
        ("service_account", "not a valid Kubernetes object name"),
    ],
)
def test_bad_object_names_are_refused(field: str, words: str) -> None:
    refused(lambda: step(**{field: "Not Valid"}), (field,), words)


def test_bad_image_pull_secret_is_refused() -> None:
    refused(lambda: step(image_pull_secrets=["ok", "Not_OK"]), ("image_pull_secrets",))


@pytest.mark.parametrize("name", ["", "   ", "a\nb"])
def test_blank_or_multiline_step_name_is_refused(name: str) -> None:
    with pytest.raises(ValidationError) as caught:
        step(name=name)
    assert caught.value.errors()[0]["loc"] == ("name",)


# --- paths -------------------------------------------------------------------------------


@pytest.mark.parametrize("workdir", ["work", "./work", "/", "/k8sjobs/work", ""])
def test_bad_workdir_is_refused(workdir: str) -> None:
    refused(lambda: step(workdir=workdir), ("workdir",), "absolute directory")


def test_workdir_is_normalised() -> None:
    assert step(workdir="/scratch//run/").workdir == "/scratch/run"


@pytest.mark.parametrize("path", ["../out", "/etc/passwd", "a/../../b", "..", ""])
def test_output_paths_escaping_workdir_are_refused(path: str) -> None:
    refused(lambda: step(outputs={"result": path}), ("outputs",), "inside the work directory")


def test_output_paths_are_normalised() -> None:
    assert step(outputs={"r": "./out//a.txt"}).outputs == {"r": "out/a.txt"}


@pytest.mark.parametrize("name", ["Result", "-x", "a b", "a" * 129])
def test_bad_artifact_names_are_refused(name: str) -> None:
    refused(lambda: step(outputs={name: "out"}), ("outputs",), "not a valid artifact name")


def test_output_of_unknown_name_raises_key_error() -> None:
    with pytest.raises(KeyError, match="its outputs: model"):
        step(outputs={"model": "m.pt"}).output("weights")


# --- durations ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("walltime", "seconds"),
    [
        (3600, 3600),
        ("3600", 3600),
        ("01:00:00", 3600),
        ("1:30", 90),
        ("1h30m", 5400),
        ("1h 30m", 5400),
        ("90s", 90),
        ("2d", 172800),
        (timedelta(minutes=5), 300),
    ],
)
def test_walltimes_are_understood(walltime: Any, seconds: int) -> None:
    assert step(walltime=walltime).walltime == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    "walltime", ["forever", "1 hour", "1h30", "", "1e3", "01:xx:00", float("nan"), float("inf")]
)
def test_bad_walltimes_are_refused(walltime: Any) -> None:
    refused(lambda: step(walltime=walltime), ("walltime",), "not a duration")


@pytest.mark.parametrize("walltime", [0, -5, "0s", 0.5])
def test_walltime_under_a_second_is_refused(walltime: Any) -> None:
    refused(lambda: step(walltime=walltime), ("walltime",), "at least one second")


def test_negative_ttl_is_refused() -> None:
    refused(lambda: step(ttl_after_finished=-1), ("ttl_after_finished",), "negative")


def test_parse_duration_passes_none_through() -> None:
    assert parse_duration(None) is None


def test_negative_retries_are_refused() -> None:
    refused(lambda: step(retries=-1), ("retries",))


# --- tolerations -------------------------------------------------------------------------


def test_exists_toleration_with_value_is_refused() -> None:
    refused(lambda: Toleration(key="gpu", operator="Exists", value="x"), ("value",), "Exists")


def test_keyless_toleration_must_use_exists() -> None:
    refused(lambda: Toleration(value="x"), ("operator",), "Exists")
    assert Toleration(operator="Exists").key is None


def test_toleration_seconds_needs_noexecute() -> None:
    refused(
        lambda: step(tolerations=[{"key": "a", "value": "b", "toleration_seconds": 30}]),
        ("tolerations", 0, "effect"),
        "NoExecute",
    )


# --- the model as a whole ----------------------------------------------------------------


def test_steps_are_frozen() -> None:
    with pytest.raises(ValidationError):
        step().name = "other"  # type: ignore[misc]


def test_from_script_file_defaults_name_to_stem(tmp_path: Any) -> None:
    path = tmp_path / "prep.sh"
    path.write_text("echo prep\n")
    made = Step.from_script_file(path, shell="sh")
    assert (made.name, made.script, made.argv) == ("prep", "echo prep\n", ("/bin/sh",))


# --- out-of-range values, references, annotation size (issue 14) --------------------------


@pytest.mark.parametrize(
    "walltime",
    [1e20, 99999999999999999999, -(10**30), "9" * 400, "99999999999:00:00", "9999999999d"],
)
def test_walltimes_no_timedelta_holds_are_refused(walltime: Any) -> None:
    # These raised OverflowError from timedelta, a traceback instead of a field error.
    refused(lambda: step(walltime=walltime), ("walltime",), "longer than", "shorter")
    refused(lambda: step(ttl_after_finished=walltime), ("ttl_after_finished",))


def test_ttl_over_int32_is_refused() -> None:
    refused(lambda: step(ttl_after_finished=2**31), ("ttl_after_finished",), "32-bit")
    assert step(ttl_after_finished=2**31 - 1).ttl_after_finished is not None


@pytest.mark.parametrize(
    ("fields", "loc"),
    [
        ({"retries": 2**31}, ("retries",)),
        ({"resources": {"nodes": 2**31}}, ("resources", "nodes")),
        ({"resources": {"tasks": 10**30}}, ("resources", "tasks")),
        ({"resources": {"cores_per_task": 2**31}}, ("resources", "cores_per_task")),
        ({"resources": {"gpus": 2**31}}, ("resources", "gpus")),
        (
            {"tolerations": [{"operator": "Exists", "toleration_seconds": 2**63}]},
            ("tolerations", 0, "toleration_seconds"),
        ),
    ],
)
def test_counts_beyond_the_api_integer_fields_are_refused(
    fields: dict[str, Any], loc: tuple[str | int, ...]
) -> None:
    refused(lambda: step(**fields), loc, "less than or equal")


@pytest.mark.parametrize(
    "ref",
    [
        "::::",
        "UPPER/case:v1",
        "r:bad tag!",
        "r@sha256:short",
        "a//b:v1",
        "r:",
        ":v1",
        "/r",
        "../r:v1",
    ],
)
def test_malformed_input_references_are_refused_before_anything_runs(ref: str) -> None:
    message = refused(lambda: step(inputs={"data": ref}), ("inputs",), '"data"', "repository:tag")
    assert ref in message


@given(st.text(max_size=40))
@settings(max_examples=300, deadline=None)
def test_step_accepts_exactly_the_references_the_pull_parses(ref: str) -> None:
    # The pod's pull parses the reference with parse_reference: whatever it refuses must be
    # refused here, before anything is sent.
    try:
        parse_reference(ref)
    except ValueError:
        refused(lambda: step(inputs={"data": ref}), ("inputs",), '"data"')
    else:
        assert step(inputs={"data": ref}).inputs["data"] == ref


def test_good_input_references_pass() -> None:
    for ref in ["study/data:v1", "localhost:5000/d:1", "reg.example/a/b@sha256:" + "a" * 64]:
        assert step(inputs={"data": ref}).inputs["data"] == ref


def test_annotations_over_256_kib_are_refused_with_the_fix() -> None:
    limit = ANNOTATIONS_LIMIT
    fits = {"a": "x" * (limit - 1)}
    assert step(annotations=fits).annotations == fits
    refused(
        lambda: step(annotations={"a": "x" * limit}),
        ("annotations",),
        str(limit + 1),
        "input artifact",
    )
    # Bytes, not characters: the API server counts the UTF-8 encoding.
    refused(lambda: step(annotations={"a": "é" * (limit // 2)}), ("annotations",))


def test_render_refuses_annotations_that_overflow_with_its_own() -> None:
    nearly = step(annotations={"a": "x" * (ANNOTATIONS_LIMIT - 10)}, name="long-step")
    with pytest.raises(ValueError, match=r'Step "long-step".*shorten its annotations'):
        render(nearly, Target(study="s"))


# Every field, any value: a Step either validates or raises a ValidationError naming the
# field. Another exception (OverflowError, TypeError, ...) is a traceback for the user.
_values = any_values(
    st.binary(max_size=8),
    st.timedeltas(),
    words=["1h", "01:00:00", "4Gi", "1e999", "sh", "::::", "$(LAUNCHER)[9n]", "{x}"],
    keys=st.one_of(st.text(max_size=8), st.integers()),
)


@given(st.dictionaries(st.sampled_from(sorted(Step.model_fields)), _values, max_size=4))
@settings(max_examples=400, deadline=None)
def test_any_value_in_any_field_is_a_validation_error_or_a_step(fields: dict[str, Any]) -> None:
    fields = {"name": "s", "script": "echo\n", **fields}
    try:
        Step(**fields)
    except ValidationError as exc:
        for error in exc.errors():
            assert error["loc"] and error["loc"][0] in fields, error


def test_from_script_file_names_the_file_and_line_of_a_non_utf8_byte(tmp_path: Any) -> None:
    path = tmp_path / "prep.sh"
    path.write_bytes(b"echo one\necho \xe9\n")
    with pytest.raises(ValueError, match=r"prep.sh:2: not UTF-8 text \(byte 0xe9 at column 6\)"):
        Step.from_script_file(path)


@pytest.mark.parametrize(
    "env",
    [{"GREETING": "a\0b"}, {"TOKEN": SecretStr("s3cret\0x")}],
    ids=["plain", "secret"],
)
def test_an_env_value_with_a_nul_byte_is_refused_naming_the_variable(env: Any) -> None:
    # A NUL cannot reach a process's environment: the step would fail with exit code 128.
    with pytest.raises(ValidationError) as raised:
        Step(name="a", script="true", env=env)
    (key,) = env
    message = str(raised.value)
    assert f'"{key}": its value contains a NUL byte' in message
    assert "s3cret" not in message  # a secret's value is never shown


@pytest.mark.parametrize(
    ("field", "value"),
    [("shell", "/bin/bash\0-x"), ("workdir", "/work\0"), ("image", "busybox\0")],
)
def test_an_argument_with_a_nul_byte_is_refused_naming_the_field(field: str, value: str) -> None:
    with pytest.raises(ValidationError, match=f"(?s){field}.*contains a NUL byte"):
        Step(name="a", script="true", **{field: value})


def test_a_script_with_a_nul_byte_is_refused_naming_its_line() -> None:
    with pytest.raises(ValidationError, match=r"(?s)script.*NUL byte on line 2"):
        Step(name="a", script="echo hi\nprintf 'a\0b'\n")
