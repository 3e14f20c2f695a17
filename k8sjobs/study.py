"""Studies: a YAML file of steps, validated by the Step model, run as a DAG.

    name: pipeline
    defaults:
      image: python:3.12-slim
      resources: {cores_per_task: 1, memory: 256Mi}
    steps:
      - name: produce
        script: python3 make_data.py > data.csv
        outputs: {data: data.csv}
      - name: transform
        parameters: {SHARD: [0, 1, 2]}      # fans out: one step per value, $SHARD in env
        inputs: {data: produce.data}        # another step's output: "<step>.<output>"
        script_file: transform.sh           # relative to the study file
        outputs: {part: part.csv}
      - name: aggregate
        inputs: {parts: transform.part}     # one input per instance: parts-shard-0, ...
        script: cat $K8SJOBS_INPUTS/parts-*/part.csv > total.csv

A step runs once every step it depends on (``depends``, or through its inputs) has
succeeded; when one fails, its dependents end FAILED with reason "DependencyFailed"
without running. Errors in the file name the line and the field.
"""

from __future__ import annotations

import asyncio
import difflib
import graphlib
import hashlib
import itertools
import json
import logging
import math
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ._boundedyaml import YamlLimitError, load_bounded, one_line_error
from ._printable import printable
from ._textfile import TextFileError, read_text_file
from .errors import ClusterUnreachable, StudyBusy, StudyError
from .handle import StepHandle
from .runrecord import RunJournal
from .session import Session, dependency_failure
from .state import StepResult, StepState
from .steps.allocation import Allocation, refusal
from .steps.spec import SCRIPT_LIMIT, Step, StepOutput

_log = logging.getLogger("k8sjobs.study")

__all__ = ["Study", "StudyRun", "load_study"]

_STUDY_KEYS = {"name", "description", "defaults", "steps", "allocations"}
_EXTRA_STEP_KEYS = {"script_file", "depends", "parameters", "backend"}
_MERGED = ("resources", "env", "labels", "annotations", "node_selector")
# A study file's size, and its steps once parameters are expanded (issue: a few lines of
# parameters make millions of steps). The YAML bounds are in _boundedyaml.
MAX_STUDY_BYTES = 4 * 1024 * 1024
MAX_STEPS = 10_000


@dataclass(frozen=True)
class Study:
    """A named set of steps, expanded (one Step per parameter value) and checked."""

    name: str
    steps: tuple[Step, ...]
    depends: Mapping[str, tuple[str, ...]]
    backends: Mapping[str, str | None] = field(default_factory=dict)
    description: str = ""
    #: The pods held for the study, that its steps naming them run in (docs/allocations.md).
    allocations: tuple[Allocation, ...] = ()

    def step(self, name: str) -> Step:
        """Return the step called ``name``."""
        for step in self.steps:
            if step.name == name:
                return step
        raise KeyError(f'study "{self.name}" has no step "{name}"')


def load_study(path: str | Path, *, name: str | None = None) -> Study:
    """Return the study described by the YAML file at ``path`` (errors name line and field)."""
    path = Path(path)
    return parse_study(read_study_text(path), base_dir=path.parent, source=str(path), name=name)


def read_study_text(path: Path) -> str:
    """Return the text of the study file at ``path`` (UTF-8, at most MAX_STUDY_BYTES)."""
    try:
        return read_text_file(path, limit=MAX_STUDY_BYTES, what="study file")
    except TextFileError as exc:
        raise StudyError(str(exc)) from None


def read_yaml(text: str, source: str) -> tuple[Any, Mapping[tuple[Any, ...], int]]:
    """Return the value of one bounded YAML document and the line of each of its paths."""
    if len(text) > MAX_STUDY_BYTES:
        raise StudyError(f"{source}: larger than the {MAX_STUDY_BYTES}-byte limit of a study")
    try:
        data, node = load_bounded(text, source)
    except YamlLimitError as exc:
        raise StudyError(str(exc)) from None
    except yaml.YAMLError as exc:
        raise StudyError(f"{one_line_error(exc, source)} (not valid YAML)") from None
    return data, (_line_index(node) if node is not None else {})


def parse_study(
    text: str, *, base_dir: Path = Path("."), source: str = "<study>", name: str | None = None
) -> Study:
    """Return the study described by YAML ``text``; ``script_file`` is read from ``base_dir``."""
    data, lines = read_yaml(text, source)
    where = _Locator(source, lines)
    if not isinstance(data, dict):
        raise StudyError(f"{source}: a study is a mapping with name, defaults and steps")
    _refuse_maestro(data, where)
    unknown = set(data) - _STUDY_KEYS
    if unknown:
        key = sorted(unknown, key=str)[0]
        raise StudyError(f"{where(key)}: {_unknown_study_key(key, data)}")
    for key in ("name", "description"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise StudyError(f'{where(key)}: {key}: write it as text, e.g. {key}: "my-study"')
    steps = data.get("steps")
    if not isinstance(steps, list) or not steps:
        raise StudyError(f"{where('steps')}: a study needs a non-empty list of steps")
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict) or not all(isinstance(k, str) for k in defaults):
        raise StudyError(f"{where('defaults')}: defaults must be a mapping of step fields")
    study_name = name or data.get("name") or Path(source).stem
    allocations = _allocations(data.get("allocations"), where)
    raw = [_merge(defaults, s, where, i) for i, s in enumerate(steps)]
    description = data.get("description") or ""
    return _expand(study_name, raw, base_dir, where, description, allocations)


def _allocations(given: Any, where: _Locator) -> dict[str, Allocation]:
    """Return the study's ``allocations:`` by name, each checked by the Allocation model."""
    if given is None:
        return {}
    if not isinstance(given, list):
        raise StudyError(
            f"{where('allocations')}: allocations: write a list of allocations, e.g. "
            "allocations: [{name: pool, nodes: 2, resources: {cores_per_task: 1}}]"
        )
    found: dict[str, Allocation] = {}
    first: dict[str, int] = {}
    problems: list[str] = []
    for i, item in enumerate(given):
        if not isinstance(item, dict):
            problems.append(
                f"{where('allocations', i)}: allocation {i + 1}: each allocation is a mapping "
                "with a name, e.g. {name: pool, nodes: 2}"
            )
            continue
        try:
            allocation = Allocation(**{str(k): v for k, v in item.items()})
        except ValidationError as exc:
            spec = {**item, "_index": i}
            problems.append(_describe(exc, spec, where, ("allocations", i), "allocation"))
            continue
        if allocation.name in found:
            problems.append(
                f'{where("allocations", i, "name")}: allocation "{allocation.name}": name: '
                f'another allocation is called "{allocation.name}" '
                f"({where('allocations', first[allocation.name], 'name')}); give each its own name"
            )
            continue
        found[allocation.name] = allocation
        first[allocation.name] = i
    if problems:
        raise StudyError("\n".join(problems))
    return found


def _allocation_problem(
    step: Step, spec: Mapping[str, Any], allocations: Mapping[str, Allocation], where: _Locator
) -> str | None:
    """Return why ``step`` cannot have its ``allocation`` (none of the study's is called so,
    or ``refusal`` refuses it), at the line that names it; None when it can (or has none).
    Checked at load: a step that cannot run in its allocation is refused before anything runs.
    """
    if step.allocation is None:
        return None
    path: tuple[Any, ...] = ("steps", spec["_index"], "allocation")
    if path not in where.lines and ("defaults", "allocation") in where.lines:
        path = ("defaults", "allocation")
    allocation = allocations.get(step.allocation)
    if allocation is None:
        known = ", ".join(f'"{n}"' for n in allocations) or "none (add allocations: to it)"
        said = (
            f'no allocation is called "{step.allocation}"; the study\'s allocations: '
            f"{known}{_did_you_mean(step.allocation, allocations)}"
        )
    else:
        reason = refusal(step, allocation)
        if reason is None:
            return None
        said = f'it cannot run in allocation "{allocation.name}": {reason}'
    return f'{where(*path)}: step "{spec["name"]}": allocation: {said}'


def _refuse_maestro(data: Mapping[Any, Any], where: _Locator) -> None:
    """Refuse a Maestro study file (its steps under study:, its run: blocks) by its name:
    key by key it reads as a k8sjobs study or step with unknown keys."""
    if isinstance(data.get("study"), list) and {"batch", "description", "env"} & set(data):
        raise StudyError(
            f"{where('study')}: study: this is a Maestro study file (study:, batch:): run it "
            "with maestro run (docs/maestro.md); k8sjobs reads its own study format "
            "(docs/studies.md)"
        )


def _unknown_study_key(key: Any, data: Mapping[Any, Any]) -> str:
    """Say what is wrong with a key a study does not have, and what was likely meant."""
    shown = _shown(key)
    said = f'unknown key "{shown}"; a study has: {", ".join(sorted(_STUDY_KEYS))}'
    if key in Step.model_fields or key in _EXTRA_STEP_KEYS:  # a step's key, a step's file
        if "steps" in data:
            return f'{said}; "{shown}" is a step\'s key: put it in a step, or in defaults:'
        return (
            f'{said}; "{shown}" is a step\'s key: a study lists its steps under steps:, '
            "as steps: [{name: prepare, script: ...}]"
        )
    close = difflib.get_close_matches(shown, sorted(_STUDY_KEYS), n=1)
    return f'{said}; did you mean "{close[0]}"?' if close else said


class _Locator:
    """Turns a path in the study document into "file:line" for error messages."""

    def __init__(self, source: str, lines: Mapping[tuple[Any, ...], int]) -> None:
        self.source = source
        self.lines = lines

    def __call__(self, *path: Any) -> str:
        for end in range(len(path), 0, -1):
            # Lines are indexed by a key's text: a key read as a number (1:) is found by it.
            for where in (path[:end], (*path[: end - 1], str(path[end - 1]))):
                if where in self.lines:
                    return f"{self.source}:{self.lines[where]}"
        return self.source


def _line_index(node: yaml.Node, path: tuple[Any, ...] = ()) -> dict[tuple[Any, ...], int]:
    # Recursion is bounded: the loader refused documents deeper than MAX_DEPTH.
    lines = {path: node.start_mark.line + 1}
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                below = _line_index(value, (*path, key.value))
                below[(*path, key.value)] = key.start_mark.line + 1  # the key's, not its value's
                lines.update(below)
                read = key.value if key.tag == _STR_TAG else _key_value(key)
                if read != key.value:  # null: is None, 1: is 1 in the document read
                    lines.setdefault((*path, read), key.start_mark.line + 1)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines.update(_line_index(item, (*path, i)))
    return lines


_STR_TAG = "tag:yaml.org,2002:str"


def _key_value(key: yaml.ScalarNode) -> Any:
    """Return the value a YAML mapping key is read as (None for ``null:``), or its text."""
    try:
        value = yaml.SafeLoader("").construct_object(key)
        hash(value)
    except (yaml.YAMLError, TypeError, ValueError):
        return key.value
    return value


def _shown(key: Any) -> str:
    """Return a mapping key as the YAML file writes it: ``null``, ``true``, ``1``."""
    if isinstance(key, str):
        return key
    return yaml.safe_dump(key, default_flow_style=True).removesuffix("\n...\n").strip()


def _merge(defaults: Mapping[str, Any], step: Any, where: _Locator, index: int) -> dict[str, Any]:
    if not isinstance(step, dict):
        raise StudyError(f"{where('steps', index)}: each step is a mapping with a name and script")
    bad = [k for k in step if not isinstance(k, str)]
    if bad:
        raise StudyError(
            f"{where('steps', index, bad[0])}: step {index + 1}: {_shown(bad[0])} is not a "
            "field name; fields are words such as name, script, depends"
        )
    merged = {**defaults, **step, "_index": index}
    for key in _MERGED:
        if isinstance(defaults.get(key), dict) and isinstance(step.get(key), dict):
            merged[key] = {**defaults[key], **step[key]}
    _check_study_fields(merged, where)
    return merged


def _check_study_fields(spec: dict[str, Any], where: _Locator) -> None:
    """Refuse a wrong type in the fields the study reads itself (Step checks the rest)."""
    index = spec["_index"]
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        shown = "" if name is None else f" ({name!r} is not text)"
        raise StudyError(
            f"{where('steps', index, 'name')}: step {index + 1}: name: each step needs a name"
            f'{shown}; write e.g. name: "prepare"'
        )
    label = f'step "{name}"'
    for key, fix in _TEXT_FIELDS.items():
        if key in spec and not isinstance(spec[key], str | None):
            raise StudyError(f"{where('steps', index, key)}: {label}: {key}: {fix}")
    depends = spec.get("depends")
    if isinstance(depends, str):
        spec["depends"] = [depends]  # one name, not a list of its letters
    elif depends is not None and not (
        isinstance(depends, list) and all(isinstance(d, str) for d in depends)
    ):
        raise StudyError(
            f"{where('steps', index, 'depends')}: {label}: depends: write a step name or a "
            "list of step names, e.g. depends: [prepare, fetch]"
        )
    if spec.get("backend") not in (None, *_BACKENDS):
        raise StudyError(
            f"{where('steps', index, 'backend')}: {label}: backend: "
            f"{spec['backend']!r} is not a backend; write one of: {', '.join(_BACKENDS)}"
        )
    for key in ("inputs", "outputs", "parameters"):
        value = spec.get(key)
        if value is not None and not (
            isinstance(value, dict) and all(isinstance(k, str) for k in value)
        ):
            raise StudyError(
                f"{where('steps', index, key)}: {label}: {key}: write a mapping of names, "
                f"e.g. {_EXAMPLES[key]}"
            )
    _check_parameters(spec, where, label)


def _check_parameters(spec: Mapping[str, Any], where: _Locator, label: str) -> None:
    params = spec.get("parameters") or {}
    for key, values in params.items():
        if not (
            isinstance(values, list)
            and values
            and all(isinstance(v, str | int | float) for v in values)
        ):
            raise StudyError(
                f"{where('steps', spec['_index'], 'parameters', key)}: {label}: "
                f"parameters.{key}: write a non-empty list of plain values, "
                "e.g. {SHARD: [0, 1, 2]}"
            )


_BACKENDS = ("local", "kubernetes")
_TEXT_FIELDS = {"script_file": 'write a path, e.g. script_file: "run.sh"'}
_EXAMPLES = {
    "inputs": "inputs: {data: prepare.table}",
    "outputs": "outputs: {table: out/table.csv}",
    "parameters": "parameters: {SHARD: [0, 1, 2]}",
}


def _expand(
    study: str,
    raw: list[dict[str, Any]],
    base_dir: Path,
    where: _Locator,
    description: str,
    allocations: Mapping[str, Allocation],
) -> Study:
    for i, spec in enumerate(raw):
        first = next(s for s in raw if s["name"] == spec["name"])
        if first is not spec:
            raise StudyError(
                f'{where("steps", i, "name")}: step "{spec["name"]}": name: another step is '
                f'already called "{spec["name"]}" ({where("steps", first["_index"], "name")}); '
                "give each step its own name"
            )
    instances = {s["name"]: _instances(s, where) for s in raw}
    _check_unique_instances(raw, instances, where)
    outputs = {s["name"]: set(s.get("outputs") or {}) for s in raw}
    steps: list[Step] = []
    depends: dict[str, tuple[str, ...]] = {}
    backends: dict[str, str | None] = {}
    problems: list[str] = []
    for spec in raw:
        for instance_name, params in instances[spec["name"]]:
            try:
                step, deps = _build(
                    spec, instance_name, params, (instances, outputs), base_dir, where
                )
            except StudyError as exc:  # report every bad step at once, not one per run
                problems.append(str(exc))
                break
            refused = _allocation_problem(step, spec, allocations, where)
            if refused is not None:
                problems.append(refused)
                break
            steps.append(step)
            depends[instance_name] = deps
            backends[instance_name] = spec.get("backend")
    if problems:
        raise StudyError("\n".join(problems))
    _check_acyclic(depends, {n: s for s in raw for n, _ in instances[s["name"]]}, where)
    return Study(study, tuple(steps), depends, backends, description, tuple(allocations.values()))


def _instances(spec: Mapping[str, Any], where: _Locator) -> list[tuple[str, dict[str, str]]]:
    params = spec.get("parameters") or {}
    if not params:
        return [(spec["name"], {})]
    keys = sorted(params)
    count = math.prod(len(params[k]) for k in keys)
    if count > MAX_STEPS:
        raise StudyError(
            f'{where("steps", spec["_index"], "parameters")}: step "{spec["name"]}": '
            f"parameters: {count} combinations, more than the {MAX_STEPS} steps a study may "
            "have; use fewer values, or loop inside one step"
        )
    combos = itertools.product(*(params[k] for k in keys))
    result = []
    for combo in combos:
        values = {k: str(v) for k, v in zip(keys, combo, strict=True)}
        suffix = ",".join(f"{k}={v}" for k, v in values.items())
        result.append((f"{spec['name']}[{suffix}]", values))
    return result


def _check_unique_instances(
    raw: Sequence[Mapping[str, Any]], instances: _Instances, where: _Locator
) -> None:
    """Refuse two steps that end up with one name once parameters are expanded.

    ``b`` with ``parameters: {X: [1]}`` makes "b[X=1]", which another step may already be
    called; ``X: [1, "1"]`` makes it twice. Kept, one would silently replace the other.
    """
    seen: dict[str, str] = {}
    total = 0
    for spec in raw:
        total += len(instances[spec["name"]])
        if total > MAX_STEPS:
            raise StudyError(
                f"{where('steps', spec['_index'])}: the study has more than {MAX_STEPS} steps "
                "once parameters are expanded; split it, or loop inside fewer steps"
            )
        for name, params in instances[spec["name"]]:
            source = _source(spec, params, where)
            if name in seen:
                raise StudyError(
                    f"{where('steps', spec['_index'])}: "
                    f'two steps are called "{name}": {seen[name]} and {source}; '
                    "rename one, or make the parameter values distinct"
                )
            seen[name] = source


def _source(spec: Mapping[str, Any], params: Mapping[str, str], where: _Locator) -> str:
    if not params:
        return f'step "{spec["name"]}" ({where("steps", spec["_index"], "name")})'
    values = ", ".join(f"{k}={v}" for k, v in params.items())
    return (
        f'step "{spec["name"]}" with parameters {values} '
        f"({where('steps', spec['_index'], 'parameters')})"
    )


def _build(
    spec: Mapping[str, Any],
    name: str,
    params: Mapping[str, str],
    known: tuple[_Instances, Mapping[str, set[str]]],
    base_dir: Path,
    where: _Locator,
) -> tuple[Step, tuple[str, ...]]:
    index = spec["_index"]
    instances = known[0]
    label = f'step "{spec["name"]}"'
    fields = {k: v for k, v in spec.items() if k not in _EXTRA_STEP_KEYS and k != "_index"}
    _check_step_keys(fields, index, label, where)
    fields["name"] = name
    if "script_file" in spec:
        if "script" in spec:
            raise StudyError(
                f"{where('steps', index, 'script')}: {label}: script: give script or "
                "script_file, not both"
            )
        try:
            fields["script"] = read_text_file(
                base_dir / spec["script_file"], limit=SCRIPT_LIMIT, what="script file"
            )
        except TextFileError as exc:
            raise StudyError(
                f"{where('steps', index, 'script_file')}: {label}: script_file: {exc}"
            ) from None
    if params and isinstance(fields.get("env") or {}, dict):  # else Step refuses env
        fields["env"] = {**(fields.get("env") or {}), **params}
    deps: list[str] = []
    fields["inputs"] = _inputs(spec, known, deps, where)
    for dep in spec.get("depends") or []:
        if dep not in instances:
            raise StudyError(
                f"{where('steps', index, 'depends')}: {label}: depends: no step is called "
                f'"{dep}"{_did_you_mean(str(dep), instances)}'
            )
        deps += [n for n, _ in instances[dep]]
    try:
        step = Step(**fields)
    except ValidationError as exc:
        raise StudyError(_describe(exc, spec, where)) from None
    return step, tuple(dict.fromkeys(deps))


_Instances = Mapping[str, list[tuple[str, dict[str, str]]]]


def _check_step_keys(fields: Iterable[str], index: int, label: str, where: _Locator) -> None:
    """Refuse a key neither Step nor the study takes, when it is not a typo of a Step field.

    Step names the field a typo of its own meant; it knows nothing of the study's keys, so
    ``parameter:`` would get Step's field list and never "parameters" (docs/studies.md).
    """
    known = set(Step.model_fields)
    for key in fields:
        if key in known:
            continue
        close = difflib.get_close_matches(key, sorted(known | _EXTRA_STEP_KEYS), n=1)
        if close and close[0] in known:
            continue  # Step's own message names it
        hint = (
            f'did you mean "{close[0]}"?'
            if close
            else "a step takes the fields of Step (docs/steps.md#fields) and "
            + ", ".join(sorted(_EXTRA_STEP_KEYS))
        )
        path: tuple[Any, ...] = ("steps", index, key)
        if path not in where.lines and ("defaults", key) in where.lines:
            path = ("defaults", key)
        raise StudyError(f'{where(*path)}: {label}: {key}: "{key}" is not a step key; {hint}')


def parse_step_file(
    data: Mapping[str, Any], lines: Mapping[tuple[Any, ...], int], source: str
) -> Step:
    """Return the one Step a step file (a mapping with no ``steps:``) holds.

    Its errors are located at file:line as a study's are; a key that is not a step's but
    close to a study's (``step:`` for ``steps:``) says the file was read as one step.
    """
    where = _Locator(source, lines)
    _refuse_maestro(data, where)
    known = set(Step.model_fields)
    for key in data:
        close = difflib.get_close_matches(str(key), sorted(known | _STUDY_KEYS), n=1)
        if key in known or (close and close[0] in known):
            continue  # a field, or a typo of one: Step's own message names it
        if key in _STUDY_KEYS:
            hint = "it is a study's, and a study lists its steps under steps: (docs/studies.md)"
        elif close:
            hint = f'did you mean "{close[0]}"? Without steps: the file is read as one step'
        else:
            hint = "a step file holds the fields of one Step (docs/steps.md#fields)"
        raise StudyError(f'{where(key)}: {key}: "{key}" is not a step key; {hint}')
    try:
        return Step.model_validate(data)
    except ValidationError as exc:
        raise StudyError(_describe(exc, data, where, at=())) from None


def _did_you_mean(name: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f'; did you mean "{close[0]}"?' if close else ""


def _inputs(
    spec: Mapping[str, Any],
    known: tuple[_Instances, Mapping[str, set[str]]],
    deps: list[str],
    where: _Locator,
) -> dict[str, Any]:
    instances, outputs = known
    inputs: dict[str, Any] = {}
    for key, value in (spec.get("inputs") or {}).items():
        here = (
            f'{where("steps", spec["_index"], "inputs", key)}: step "{spec["name"]}": inputs.{key}'
        )
        producer, output = _producer(value, instances)
        if producer is None:
            if isinstance(value, str) and "." in value and not any(c in value for c in "/:@"):
                step = value.rpartition(".")[0]  # "<step>.<output>" naming no step: a typo
                raise StudyError(
                    f'{here}: no step is called "{step}"{_did_you_mean(step, instances)} '
                    '(write "<step>.<output>", or an artifact reference with a repository)'
                )
            inputs[key] = value
            continue
        if producer not in instances:
            raise StudyError(
                f'{here}: no step is called "{producer}"{_did_you_mean(producer, instances)}'
            )
        if output not in outputs[producer]:
            have = ", ".join(sorted(outputs[producer])) or "none"
            raise StudyError(
                f'{here}: step "{producer}" has no output "{output}" (its outputs: {have})'
            )
        copies = instances[producer]
        names = fan_in_names(key, [params for _, params in copies])
        for (instance, _), name in zip(copies, names, strict=True):
            inputs[name] = StepOutput(step=instance, output=output)
            deps.append(instance)
    return inputs


# An input's name is an artifact name (steps/spec.py): lowercase, digits, "_.-", at most 128.
_NAME_LIMIT = 128
_NOT_IN_NAME = re.compile(r"[^a-z0-9_.-]")
_HASH_LENGTH = 8


def fan_in_names(key: str, copies: Sequence[Mapping[str, str]]) -> list[str]:
    """Name the inputs ``key`` fans in from a swept step's instances, one per parameter set.

    ``parts`` over ``SHARD: [0, 1]`` gives ``parts-shard-0`` and ``parts-shard-1``. The user
    never wrote these names, so they must always be valid artifact names: each value is
    lowercased with other characters made ``-``, and a name whose values changed that way
    (``HG002``, ``x y``), grew past the length limit, or would equal another's ends in a short
    hash of the parameter values, so distinct values keep distinct names.
    """
    if len(copies) == 1 and not copies[0]:
        return [key]
    plain = [_plain_name(key, params) for params in copies]
    taken = Counter(name for name, _ in plain)
    names = [
        name if exact and taken[name] == 1 else _hashed_name(name, params)
        for (name, exact), params in zip(plain, copies, strict=True)
    ]
    if len(set(names)) != len(names):  # a value spelling out another's hashed name
        names = [
            _hashed_name(name, params) for (name, _), params in zip(plain, copies, strict=True)
        ]
    if len(set(names)) != len(names):  # two hashes alike: 1 in 2**32 per pair
        raise StudyError(f"inputs.{key}: two instances' parameter values give one input name")
    return names


def _plain_name(key: str, params: Mapping[str, str]) -> tuple[str, bool]:
    """Return the name of one instance's input, and whether it stands for the values exactly."""
    parts = [key]
    exact = True
    for name, value in params.items():
        clean = _NOT_IN_NAME.sub("-", value.lower())
        exact = exact and clean == value and value != ""
        parts += [_NOT_IN_NAME.sub("-", name.lower()), clean]
    text = "-".join(parts)
    return text, exact and len(text) <= _NAME_LIMIT


def _hashed_name(name: str, params: Mapping[str, str]) -> str:
    digest = hashlib.sha256(json.dumps(sorted(params.items())).encode()).hexdigest()
    return f"{name[: _NAME_LIMIT - _HASH_LENGTH - 1]}-{digest[:_HASH_LENGTH]}"


def _producer(
    value: Any, instances: Mapping[str, list[tuple[str, dict[str, str]]]]
) -> tuple[str | None, str]:
    """Return (step, output) when ``value`` names another step's output, else (None, "")."""
    if isinstance(value, dict) and set(value) == {"step", "output"}:
        step, output = value["step"], value["output"]
        if isinstance(step, str) and isinstance(output, str):
            return step, output
    if isinstance(value, str) and "." in value:
        step, _, output = value.rpartition(".")
        if step in instances:
            return step, output
    return None, ""


def _describe(
    exc: ValidationError,
    spec: Mapping[str, Any],
    where: _Locator,
    at: tuple[Any, ...] | None = None,
    what: str = "step",
) -> str:
    """Return one located line per error; ``at`` is where the step's mapping is (a study's
    ``steps[i]`` unless given: a step file's is the top of the document); ``what`` the kind
    of mapping ("allocation": no defaults apply to one)."""
    at = ("steps", spec["_index"]) if at is None else at
    lines = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        path = (*at, *loc)
        defaulted = what == "step" and ("defaults", *loc) in where.lines
        if path[: len(at) + 1] not in where.lines and defaulted:
            path = ("defaults", *loc)
        field_name = ".".join(str(p) for p in loc) or "step"
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown field (a typo?)"
        message += _what_was_given(error)
        label = f'{what} "{spec["name"]}"' if spec.get("name") is not None else f"the {what}"
        lines.append(f"{where(*path)}: {label}: {field_name}: {message}")
    return "\n".join(lines)


# The pydantic error types that say only what was expected; the value given and how to write
# it are added, since a study file's author cannot see what YAML made of ``queue: yes``.
_WRONG_VALUE = frozenset({"string_type", "literal_error", "enum"})


def _what_was_given(error: Mapping[str, Any]) -> str:
    """Return ", not VALUE" and the fix for a value of the wrong type or outside a choice."""
    if error["type"] not in _WRONG_VALUE or "input" not in error:
        return ""
    given = error["input"]
    if isinstance(given, bool):
        return (
            f", not the boolean {str(given).lower()} (YAML reads unquoted yes, no, on, off, "
            "true and false as booleans): write the value in quotes"
        )
    if isinstance(given, int | float):
        return f', not the number {given!r}: write it in quotes, "{given!r}"'
    if isinstance(given, str):
        return f', not "{printable(given[:80])}"'
    if given is None:
        return ", not null (an empty value): give one, or leave the key out"
    kind = "a list" if isinstance(given, list) else "a mapping" if isinstance(given, dict) else ""
    return f", not {kind or type(given).__name__}: give one value"


def _check_acyclic(
    depends: Mapping[str, tuple[str, ...]], raw: Mapping[str, Mapping[str, Any]], where: _Locator
) -> None:
    # graphlib walks without recursion: a chain of thousands of steps is no RecursionError.
    try:
        graphlib.TopologicalSorter(depends).prepare()
    except graphlib.CycleError as exc:
        loop = list(reversed(exc.args[1][1:]))  # graphlib lists it against the edges
        order = list(depends)
        first = min(range(len(loop)), key=lambda i: order.index(loop[i]))
        cycle = [*loop[first:], *loop[:first], loop[first]]  # from the earliest step
        spec = raw[cycle[0]]
        edge = "depends" if "depends" in spec else "inputs"
        raise StudyError(
            f'{where("steps", spec["_index"], edge)}: step "{spec["name"]}": {edge}: the '
            f"steps depend on each other in a cycle: {' -> '.join(cycle)}"
        ) from None


@dataclass
class StepRecord:
    """What the runner knows of one step: its latest result, and when the runner saw it
    queued, start running and end (sub-second, where the API's stamps are whole seconds)."""

    result: StepResult
    queued_at: datetime | None = None
    running_at: datetime | None = None
    ended_at: datetime | None = None
    backend: str | None = None
    requested: Mapping[str, Any] | None = None
    adopted: bool = False
    handle: StepHandle | None = field(default=None, repr=False)

    @property
    def origin(self) -> str:
        """Return how the step's result came about, one of ``ORIGINS``: "ran", "reused" (a
        recorded result of the same key), "adopted" (found running or ended from an
        identical earlier run), "not run" (ended without being sent: an upstream step did
        not succeed, it was refused, or the run was stopped first) or "waiting" (not sent
        yet, the run goes on). The one source of every count of origins (``count_origins``)."""
        if self.result.reason == "Cached":
            return "reused"
        if self.handle is None or self.result.reason == "DependencyFailed":
            return "not run" if self.result.state.terminal else "waiting"
        return "adopted" if self.handle.adopted or self.adopted else "ran"

    def seen(self) -> StepResult:
        """Return the result, timed by this driver where the backend's stamps are whole seconds.

        The Kubernetes API stamps a step's start and end to the second, so a step of 0.3 s
        would read "<1s"; the runner saw it start and end to the microsecond, on one clock
        (its own), so the live table shows "340ms". Finer stamps (the local backend's) and
        an adopted step's (it ran before this driver looked) are kept as they are.
        """
        if self.adopted:  # it ran before this driver looked: its own stamps are all there is
            return self.result
        return self.result.timed_by(self.running_at, self.ended_at)

    def observe(self, result: StepResult) -> None:
        """Take a newer result, noting when it was first seen running and ended.

        A result that started before this run queued the step is an earlier run's (adopted,
        finished or still running): it is marked so, and not drawn as a run of this one.
        """
        now = datetime.now().astimezone()
        started = result.started_at
        if self.handle is not None and self.handle.adopted:
            # The backend found it from an earlier run: its stamps may share the second this
            # run queued it in, so only the backend can tell (issue 34: re-attach as its end).
            self.adopted = True
        if self.queued_at is not None and started is not None and not self.adopted:
            # API stamps are whole seconds, cut down: one of this run's is never before the
            # second it was queued in.
            queued = self.queued_at
            if started.microsecond == 0:
                queued = queued.replace(microsecond=0)
            self.adopted = started < queued
        if result.state is StepState.RUNNING and self.running_at is None:
            self.running_at = now
        if result.state.terminal and self.ended_at is None:
            self.ended_at = now
            # It ran between two observations (a sliver), if a container ran at all: a Job
            # has a start time even when its image never pulled, and that is no run.
            ran = result.exit_code is not None or result.ok
            if self.running_at is None and ran and not self.adopted:
                self.running_at = now
        self.result = result


#: How a step's result came about (``StepRecord.origin``), in the order counts list them.
ORIGINS = ("ran", "reused", "adopted", "not run", "waiting")


def count_origins(origins: Iterable[str]) -> str:
    """Return how the steps came about, "3 ran, 17 reused, 1 not run" (those that occur):
    what ``run`` ends with and ``status`` and ``report`` say of the same record."""
    counts = Counter(origins)
    return ", ".join(f"{counts[o]} {o}" for o in ORIGINS if counts[o])


class StudyRun:
    """Runs a Study's DAG on a Session, at most ``max_parallel`` steps at once.

    A step whose key has a recorded success is reused (SUCCEEDED, reason "Cached"); one
    still running from an earlier driver is adopted. ``rerun`` (True: every step; or step
    names) runs those steps and every step depending on them anew. ``replace`` stops a
    step still running from another spec (SpecMismatch otherwise). ``on_change(record)``
    is called whenever a step changes state; ``records`` holds every step's latest state,
    including those not yet submitted (PENDING, reason "Waiting"), and how it came about
    (``StepRecord.origin``).
    """

    def __init__(
        self,
        study: Study,
        session: Session,
        *,
        max_parallel: int | None = None,
        on_change: Callable[[StepRecord], None] | None = None,
        replace: bool = False,
        rerun: bool | Iterable[str] = False,
    ) -> None:
        self.study = study
        self.replace = replace
        self.rerun = _rerun_set(study, rerun)
        self.session = session
        self.records = {
            s.name: StepRecord(
                StepResult(name=s.name, reason="Waiting"), backend=None, requested=_requested(s)
            )
            for s in study.steps
        }
        if max_parallel is not None and (isinstance(max_parallel, bool) or max_parallel < 1):
            raise ValueError(
                f"max_parallel {max_parallel!r}: write a number of steps of at least 1, "
                "or None for no limit"
            )
        self._gate = asyncio.Semaphore(max_parallel) if max_parallel else None
        self._on_change = on_change
        self._done: dict[str, asyncio.Event] = {s.name: asyncio.Event() for s in study.steps}
        self._handles: dict[str, StepHandle] = {}
        self.started = time.time()
        self._journal: RunJournal | None = None
        # How many steps of the study each allocation still has to run (released at 0).
        self._in_allocation = Counter(s.allocation for s in study.steps if s.allocation)

    def record_to(self, directory: Path) -> None:
        """Journal every change of a step to ``directory`` as it happens (``save`` compacts).

        One appended line per change, so recording costs the same at the 100,000th step as
        at the first, and a run whose driver dies still leaves its record (``read_run``).
        """
        self._journal = RunJournal(directory, self.study.name, self.started)
        for step in self.study.steps:
            self._journal.append(_record_json(self.records[step.name]))

    async def run(self) -> list[StepResult]:
        """Run every step; return their results in study order. Cancel to stop them all."""
        tasks = [asyncio.create_task(self._run_step(s)) for s in self.study.steps]
        try:
            await asyncio.gather(*tasks)
        except BaseException as exc:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if not isinstance(exc, ClusterUnreachable):  # then nothing can stop them
                await asyncio.shield(self._cancel_all())
            raise
        return [self.records[s.name].result for s in self.study.steps]

    async def _run_step(self, step: Step) -> None:
        try:
            deps = self.study.depends[step.name]
            waiting = [d for d in deps if not self._done[d].is_set()]
            if waiting:
                _log.info('step "%s" waits for %s', step.name, ", ".join(waiting))
            for dep in deps:
                await self._done[dep].wait()
            # A step whose upstream did not succeed is never sent (so it has no handle and
            # its origin is "not run"); each upstream's record speaks for it.
            failed = dependency_failure(self._result(step.name), [self._result(d) for d in deps])
            if failed is not None:
                self._show(failed)
                return
            after = [self._handles[d] for d in deps]
            if self._gate is None:
                await self._submit_and_wait(step, after)
            else:
                if self._gate.locked():
                    _log.info('step "%s" waits for a free slot (max_parallel)', step.name)
                async with self._gate:
                    await self._submit_and_wait(step, after)
        finally:
            self._done[step.name].set()
        await self._release_when_unused(step.allocation)

    async def _release_when_unused(self, name: str | None) -> None:
        """Release allocation ``name`` once no step of the study is left to run in it.

        Its pods would hold their cores until ``idle_timeout`` otherwise, while the study's
        other steps may wait for those very cores (a laptop's, a small queue's quota).
        """
        from .allocations.pool import AllocationBackend  # only a study with allocations

        if name is None:
            return
        self._in_allocation[name] -= 1
        held = self.session.backends.get(f"allocation/{name}")
        if self._in_allocation[name] == 0 and isinstance(held, AllocationBackend):
            _log.info('allocation "%s" is released: no step of the study is left for it', name)
            await held.release()

    async def _submit_and_wait(self, step: Step, after: list[StepHandle]) -> None:
        record = self.records[step.name]
        record.queued_at = datetime.now().astimezone()
        backend = self.study.backends.get(step.name)
        try:
            handle = await self.session.submit(
                step,
                after=after,
                backend=backend,  # type: ignore[arg-type]
                replace=self.replace,
                rerun=step.name in self.rerun,
            )
        except (StudyBusy, ClusterUnreachable):
            raise  # not this step's fault: the whole run cannot start or go on
        except Exception as exc:
            self._set(step.name, state=StepState.FAILED, reason="SubmitFailed", message=str(exc))
            return
        self._handles[step.name] = handle
        _log.info('step "%s" submitted to the %s backend', step.name, handle.backend.kind)
        record.backend = handle.backend.kind
        record.handle = handle
        handle.add_listener(self._forward)
        self._forward(handle)
        await handle.wait()

    async def _cancel_all(self) -> None:
        cancelled = await self.session.cancel_all()
        for handle in cancelled:
            self._forward(handle)
        for name, record in self.records.items():
            if not record.result.state.terminal:
                self._set(
                    name,
                    state=StepState.CANCELLED,
                    reason="Cancelled",
                    message="stopped before it ended",
                )

    def _forward(self, handle: StepHandle) -> None:
        self._changed(self.records[handle.name], handle.result)

    def _result(self, name: str) -> StepResult:
        return self.records[name].result

    def _set(self, name: str, **changes: Any) -> None:
        self._show(self.records[name].result.evolve(**changes))

    def _show(self, result: StepResult) -> None:
        self._changed(self.records[result.name], result)

    def _changed(self, record: StepRecord, result: StepResult) -> None:
        record.observe(result)
        if self._journal is not None:
            self._journal.append(_record_json(record))
        if self._on_change:
            try:
                self._on_change(record)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException:  # the caller's display: the record is kept all the same
                _log.exception(
                    "on_change raised on step %r; it is called no more", record.result.name
                )
                self._on_change = None

    def discard(self) -> None:
        """Drop the run's journal and write no record: for a run refused before it sent a
        step (``StudyBusy``: another driver holds the study), which changes nothing on disk."""
        if self._journal is not None:
            self._journal.discard()
            self._journal = None

    def save(self, directory: Path) -> Path:
        """Write the run's timeline (each step's queued, start, end, state) as JSON; return it.

        With a journal (``record_to``) this compacts it into the JSON and removes it.
        """
        journal = self._journal or RunJournal(directory, self.study.name, self.started)
        self._journal = None
        return journal.compact(self.timeline())

    def timeline(self) -> dict[str, Any]:
        """Return the run as plain data: study, start, and per step its spans and outcome."""
        return {
            "study": self.study.name,
            "started": self.started,
            "steps": [_record_json(self.records[s.name]) for s in self.study.steps],
        }


def _rerun_set(study: Study, rerun: bool | Iterable[str]) -> frozenset[str]:
    """Return the steps to run anew: ``rerun``'s and every step depending on them."""
    if rerun is True:
        return frozenset(s.name for s in study.steps)
    if rerun is False:
        return frozenset()
    names = list(rerun)
    known = {s.name for s in study.steps}
    for name in names:
        if name not in known:
            raise StudyError(
                f'--rerun: study "{study.name}" has no step "{name}"{_did_you_mean(name, known)}'
            )
    chosen = set(names)
    for step in graphlib.TopologicalSorter(study.depends).static_order():
        if any(dep in chosen for dep in study.depends.get(step, ())):
            chosen.add(step)
    return frozenset(chosen)


def _record_json(record: StepRecord) -> dict[str, Any]:
    r = record.result

    def stamp(value: datetime | None) -> float | None:
        return None if value is None else value.timestamp()

    return {
        "name": r.name,
        "state": str(r.state),
        "reason": r.reason,
        "message": r.message,
        "exit_code": r.exit_code,
        "backend": record.backend,
        "origin": record.origin,
        # This run's spans, as its driver saw them (sub-second): queued, running, ended.
        "queued": stamp(record.queued_at),
        "started": None if record.adopted else stamp(record.running_at),
        "finished": stamp(record.ended_at if record.running_at else None),
        "ended": stamp(record.ended_at),  # also for a step that never ran
        # When it ran by its backend's stamps (whole seconds from the Kubernetes API, finer
        # locally), and whether that was in an earlier run (adopted, not run by this one).
        "ran": (
            {"started": stamp(r.started_at), "finished": stamp(r.finished_at)}
            if r.started_at is not None
            else None
        ),
        "adopted": record.adopted,
        "requested": dict(record.requested) if record.requested is not None else None,
        # What the main container used (k8sjobs.usage.Usage.to_json: wall_seconds,
        # cpu_seconds, memory_peak in bytes, gpu_seconds, gpu_memory_peak, devices, source,
        # and missing: why each None figure is None); None until the step ended.
        "usage": r.usage.to_json() if r.usage is not None else None,
        "outputs": dict(r.outputs),
        # Where the driver kept its log (a step in an allocation: no Job to read it from).
        "log_file": r.log_file,
    }


def _requested(step: Step) -> dict[str, Any]:
    """Return what each pod of ``step`` asks for (the run record's ``requested``)."""
    res = step.resources
    return {
        "nodes": res.nodes,
        "cpu": res.cpu_per_node if res.cpu is None else res.cpu_cores,
        "memory": res.memory_bytes,
        "gpus": res.gpus,
    }


def summarize(results: Iterable[StepResult]) -> dict[str, int]:
    """Return how many steps ended in each state (only the states that occurred)."""
    counts: dict[str, int] = {}
    for result in results:
        counts[str(result.state)] = counts.get(str(result.state), 0) + 1
    return counts
