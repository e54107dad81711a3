"""Sweep YAML read safely: a SafeLoader with YAML 1.2 floats, ambiguous YAML 1.1 integers
refused, duplicate keys an error, and no list longer or nesting deeper than a sweep can use
(see pipeline.config's docstring).

The size and depth limits are checked first on a shape-only parse by libyaml, where PyYAML
has it (its wheels bundle it), then the file is read by PyYAML's pure-Python SafeLoader as
before. The pure-Python scanner is slow: a 375 KB file of 55,000 seeds took 4.1 s to compose
before its refusal, the libyaml shape parse 0.2 s (2-core AMD EPYC, 2026-12-07). libyaml is
not the reader itself because the two parsers differ at the edges (libyaml takes tabs as
separators and "2?" in a flow list; PyYAML takes a BOM inside the document): 31 of 2,500
random one-character mutations of the shipped and test sweep files were accepted by one and
refused by the other, and a file's meaning must not depend on which one is installed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import Node, ScalarNode, SequenceNode
from yaml.reader import ReaderError

from pipeline.config.base import (
    MAX_RUNS,
    SweepError,
    _loc_str,
    _repr,
)

try:
    from yaml.cyaml import CParser
except ImportError:  # PyYAML built without libyaml: the limits are checked by _Loader alone
    CParser = None

_MERGE_TAG = "tag:yaml.org,2002:merge"
MAX_DEPTH = 64
"""Deepest nesting of mappings and lists accepted. A sweep file nests 5 levels
(isoflop.sizes.shapes[i].d_model); the pure-Python parser recurses per level and fails near
300 (RecursionError, reported as the same "nested too deeply")."""
MAX_ITEMS = MAX_RUNS
"""Most items of one list (or keys of one mapping). Every list of a sweep file multiplies or
adds to its plan (seeds, budgets, sizes, runs, ...: each item at least one run), so a longer
one can never be a valid sweep."""
_AMBIGUOUS_INT = re.compile(r"[-+]?(?:0[0-7_]+|[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?)")


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 floats, no ambiguous YAML 1.1 numbers, no duplicate keys."""

    def construct_document(self, node: Node) -> Any:
        _check_nodes(node, keys=True)
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


class _TooMany(yaml.YAMLError):
    """A list or mapping of more than MAX_ITEMS entries; the message names its field."""


def _check_nodes(root: Node, keys: bool) -> None:
    """Refuse nesting deeper than MAX_DEPTH, a collection of more than MAX_ITEMS entries and
    (with keys) a key given twice in one mapping (iterative: deep files cannot overflow)."""
    stack: list[tuple[Node, tuple[str | int, ...]]] = [(root, ())]
    visited: set[int] = set()
    while stack:
        node, loc = stack.pop()
        if id(node) in visited or isinstance(node, ScalarNode):  # aliases share nodes
            continue
        visited.add(id(node))
        if len(loc) >= MAX_DEPTH:
            raise ConstructorError(None, None, f"nested too deeply (more than {MAX_DEPTH} "
                                   "levels of mappings and lists)", node.start_mark)
        if len(node.value) > MAX_ITEMS:
            raise _TooMany(_too_many(loc, not isinstance(node, SequenceNode), len(node.value)))
        if isinstance(node, SequenceNode):
            stack += [(item, (*loc, i)) for i, item in enumerate(node.value)]
            continue
        first: dict[tuple[str, str], yaml.Mark] = {}
        for key, value in node.value:
            if keys and isinstance(key, ScalarNode) and key.tag != _MERGE_TAG:
                ident = (key.tag, key.value)
                if ident in first:
                    raise ConstructorError(
                        None, None,
                        f"duplicate key {key.value!r} (first given on line "
                        f"{first[ident].line + 1})",
                        key.start_mark,
                    )
                first[ident] = key.start_mark
            name = key.value if isinstance(key, ScalarNode) else "?"
            stack += [(key, (*loc, name)), (value, (*loc, name))]


def _too_many(loc: tuple[str | int, ...], is_mapping: bool, count: int) -> str:
    """ "train.seeds: a list of 55,000 items; at most 10,000 (why)"."""
    where = _loc_str(loc) or "top level"
    if not is_mapping:
        return (f"{where}: a list of {count:,} items; at most {MAX_ITEMS:,} (every item adds "
                f"at least one run, and a sweep plans at most {MAX_RUNS:,})")
    return (f"{where}: a mapping of {count:,} keys; at most {MAX_ITEMS:,} (a sweep file's "
            "mappings hold a few dozen)")


def _check_shape(text: str) -> None:
    """The size and depth limits, on libyaml's events (0.15 s for 55,000 items against 4.1 s
    in pure Python; events, not nodes: libyaml's composer recurses in C per level and
    crashed the interpreter on 100,000 nested lists). A file libyaml cannot parse is left to
    _Loader, whose message it gets."""
    if CParser is None:
        return
    parser = CParser(text)
    frames: list[list] = []  # per open collection: [is mapping, events in it, its path, key]
    try:
        while not isinstance(event := parser.get_event(), yaml.DocumentEndEvent
                             | yaml.StreamEndEvent):
            if isinstance(event, yaml.CollectionEndEvent):
                is_map, n, loc, _ = frames.pop()
                if (n // 2 if is_map else n) > MAX_ITEMS:
                    raise _TooMany(_too_many(loc, is_map, n // 2 if is_map else n))
                continue
            if not isinstance(event, yaml.NodeEvent):  # stream and document starts
                continue
            loc: tuple[str | int, ...] = ()
            if frames:
                frame = frames[-1]
                if not frame[0]:
                    loc = (*frame[2], frame[1])
                elif frame[1] % 2 == 0:  # a key
                    frame[3] = event.value if isinstance(event, yaml.ScalarEvent) else "?"
                else:
                    loc = (*frame[2], frame[3])
                frame[1] += 1
            if isinstance(event, yaml.CollectionStartEvent):
                if len(frames) >= MAX_DEPTH:
                    raise ConstructorError(None, None, f"nested too deeply (more than "
                                           f"{MAX_DEPTH} levels of mappings and lists)",
                                           event.start_mark)
                frames.append([isinstance(event, yaml.MappingStartEvent), 0, loc, None])
    except yaml.YAMLError as e:
        if isinstance(e, _TooMany | ConstructorError):
            raise
    finally:
        parser.dispose()


def _read_yaml(text: str, path: Path) -> object:
    try:
        _check_shape(text)
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except _TooMany as e:
        raise SweepError(f"{path}: {e}") from None
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
