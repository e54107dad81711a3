"""Sweep YAML read safely: a SafeLoader with YAML 1.2 floats, ambiguous YAML 1.1 integers
refused, and duplicate keys an error (see pipeline.config's docstring)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.reader import ReaderError

from pipeline.config.base import (
    SweepError,
    _repr,
)

_MERGE_TAG = "tag:yaml.org,2002:merge"
_AMBIGUOUS_INT = re.compile(r"[-+]?(?:0[0-7_]+|[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?)")


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 floats, no ambiguous YAML 1.1 numbers, no duplicate keys."""

    def construct_document(self, node: Node) -> Any:
        _check_duplicate_keys(node)
        return super().construct_document(node)

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        # Explicitly tagged scalars (`!!int abc`, `!!timestamp x`) fail inside PyYAML with
        # plain ValueError/AttributeError; give them the line like any other YAML error.
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, AttributeError, OverflowError):
            tag = node.tag.replace("tag:yaml.org,2002:", "!!")
            raise ConstructorError(
                None, None, f"cannot read {_repr.repr(node.value)} as {tag}", node.start_mark
            ) from None

    def construct_yaml_int(self, node: ScalarNode) -> int:
        _refuse_ambiguous_number(node)
        return super().construct_yaml_int(node)

    def construct_yaml_float(self, node: ScalarNode) -> float:
        _refuse_ambiguous_number(node)
        return super().construct_yaml_float(node)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)[eE][-+]?\d+$"),
    list("-+0123456789."),
)
_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)
_Loader.add_constructor("tag:yaml.org,2002:float", _Loader.construct_yaml_float)


def _refuse_ambiguous_number(node: ScalarNode) -> None:
    if isinstance(node.value, str) and _AMBIGUOUS_INT.fullmatch(node.value):
        raise ConstructorError(
            None, None,
            f"ambiguous number {node.value!r}: YAML 1.1 reads a leading 0 as octal and "
            "a:b as base 60; write it in plain decimal (or quote it for a string)",
            node.start_mark,
        )


def _check_duplicate_keys(root: Node) -> None:
    """Refuse a key given twice in one mapping (iterative: deep files cannot overflow)."""
    stack, visited = [root], set()
    while stack:
        node = stack.pop()
        if id(node) in visited:  # aliases share nodes
            continue
        visited.add(id(node))
        if isinstance(node, MappingNode):
            first: dict[tuple[str, str], yaml.Mark] = {}
            for key, value in node.value:
                if isinstance(key, ScalarNode) and key.tag != _MERGE_TAG:
                    ident = (key.tag, key.value)
                    if ident in first:
                        raise ConstructorError(
                            None, None,
                            f"duplicate key {key.value!r} (first given on line "
                            f"{first[ident].line + 1})",
                            key.start_mark,
                        )
                    first[ident] = key.start_mark
                stack += [key, value]
        elif isinstance(node, SequenceNode):
            stack += node.value


def _read_yaml(text: str, path: Path) -> object:
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = " ".join(p for p in (e.context, e.problem) if p) or str(e)
        raise SweepError(f"{path}{where}: invalid YAML: {problem}") from None
    except ReaderError as e:  # a character YAML does not allow
        line = text.count("\n", 0, max(e.position, 0)) + 1
        raise SweepError(f"{path}:{line}: invalid YAML: character #x{e.character:04x} is not "
                         f"allowed ({e.reason})") from None
    except yaml.YAMLError as e:
        raise SweepError(f"{path}: invalid YAML: {e}") from None
    except RecursionError:
        raise SweepError(f"{path}: invalid YAML: nested too deeply") from None
