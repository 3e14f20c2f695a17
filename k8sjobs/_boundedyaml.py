"""YAML for files a user hands in: safe tags only, and bounded before it can grow.

A few hundred bytes of YAML anchors and aliases ("billion laughs") stand for gigabytes once
expanded; deep nesting overflows the recursive composer. The loader counts as it reads,
event by event: nesting depth, aliases, and the number of values the document holds with
every alias expanded, so a hostile file fails at the first event past a bound, naming its
line, before anything is built from it.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.constructor import ConstructorError

__all__ = [
    "MAX_ALIASES",
    "MAX_DEPTH",
    "MAX_VALUES",
    "YamlLimitError",
    "load_bounded",
    "one_line_error",
]

MAX_DEPTH = 64
MAX_ALIASES = 10_000
# Values (scalars and collections) once every alias is expanded: a study of a thousand
# steps holds some tens of thousands.
MAX_VALUES = 250_000


class YamlLimitError(ValueError):
    """The document passes one of the loader's bounds (message holds the line)."""


class _BoundedLoader(yaml.SafeLoader):
    """A SafeLoader that refuses, as it reads, a document past the module's bounds."""

    def __init__(self, text: str, source: str) -> None:
        super().__init__(text)
        self._source = source
        self._aliases = 0
        self._values = 0
        self._open: list[tuple[int, str | None]] = []  # per open collection: start, anchor
        self._sizes: dict[str, int] = {}  # anchor -> values it stands for, expanded

    def get_event(self) -> Any:
        """Return the next event, counting it against the bounds (the composer's only read)."""
        event = super().get_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.CollectionStartEvent):
            self._open.append((self._values, event.anchor))
            if len(self._open) > MAX_DEPTH:
                self._fail(event, f"the document nests deeper than {MAX_DEPTH} levels")
            self._add(1, event)
        elif isinstance(event, yaml.CollectionEndEvent):
            start, anchor = self._open.pop()
            if anchor is not None:
                self._sizes[anchor] = self._values - start
        elif isinstance(event, yaml.ScalarEvent):
            if event.anchor is not None:
                self._sizes[event.anchor] = 1
            self._add(1, event)
        elif isinstance(event, yaml.AliasEvent):
            self._alias(event)
        return event

    def _alias(self, event: yaml.AliasEvent) -> None:
        self._aliases += 1
        if self._aliases > MAX_ALIASES:
            self._fail(event, f"the document holds more than {MAX_ALIASES} aliases (*name)")
        if any(anchor == event.anchor for _, anchor in self._open):
            self._fail(event, f"the alias *{event.anchor} is inside its own anchor (a loop)")
        self._add(self._sizes.get(str(event.anchor), 1), event)

    def _add(self, values: int, event: yaml.Event) -> None:
        self._values += values
        if self._values > MAX_VALUES:
            self._fail(
                event,
                f"the document holds more than {MAX_VALUES} values once its aliases (*name) "
                "are expanded",
            )

    def _fail(self, event: yaml.Event, why: str) -> None:
        line = "" if event.start_mark is None else f":{event.start_mark.line + 1}"
        raise YamlLimitError(
            f"{self._source}{line}: {why}; a study file is refused past that bound "
            "(write the values out, or split the study)"
        )

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """Build a mapping, refusing a key written twice: YAML says keys are unique, and
        PyYAML would silently keep the last (a step with two ``env:`` blocks lost one)."""
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # "<<: *base" may repeat
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
                seen.setdefault(key, key_node)
            except TypeError:  # an unhashable key: the constructor reports it
                continue
            # by presence, not identity: an alias key written twice is one node seen twice
            if first is not None:
                raise ConstructorError(
                    None,
                    None,
                    f"the key {key!r} is written twice in one mapping (first at line "
                    f"{first.start_mark.line + 1}); keep one and merge their values",
                    key_node.start_mark,
                )
        return super().construct_mapping(node, deep=deep)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """Build ``node``'s value; a value Python refuses (a 5000-digit int, a date of
        month 13) becomes a YAML error at its line instead of a bare ValueError."""
        try:
            return super().construct_object(node, deep=deep)
        except yaml.YAMLError:
            raise
        except (ValueError, TypeError, OverflowError) as exc:
            raise ConstructorError(
                None, None, f"cannot read this value: {exc}", node.start_mark
            ) from None


def load_bounded(text: str, source: str) -> tuple[Any, yaml.Node | None]:
    """Return the value of the single YAML document ``text`` and its node tree (for lines).

    Raises YamlLimitError past a bound, ``yaml.YAMLError`` for anything else malformed.
    """
    loader = _BoundedLoader(text, source)
    try:
        node = loader.get_single_node()
        data = None if node is None else loader.construct_document(node)
    finally:
        loader.dispose()
    return data, node


def one_line_error(exc: yaml.YAMLError, source: str) -> str:
    """Return ``exc`` as ``source:line:col: message`` on one line, the shape of every other
    study error, instead of PyYAML's several lines that say "line N, column M" in words."""
    if not isinstance(exc, yaml.MarkedYAMLError):
        return f"{source}: " + " ".join(str(exc).split())
    mark = exc.problem_mark or exc.context_mark
    where = "" if mark is None else f":{mark.line + 1}:{mark.column + 1}"
    words = [part for part in (exc.problem, exc.context) if part]
    return f"{source}{where}: " + " ".join("; ".join(words).split())
