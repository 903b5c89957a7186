"""YAML loading with errors that point at a line and column, and a map from field
paths (``resources.nodes``) to the line they were written on.

The loader is stricter than ``yaml.safe_load`` where the plain reading would mean
something the writer did not: a key written twice in one mapping (the later one
would silently win) is refused naming both lines; nesting deeper than ``MAX_DEPTH``
is refused before Python's recursion limit turns it into a traceback; and aliases
are counted as what they expand to, so a "billion laughs" document is refused while
it is composed (in time linear in its text), before anything walks the expansion.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from yaml.composer import ComposerError
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from launcher.core.errors import SpecError
from launcher.core.regular import NotReadable, read_regular

MAX_DEPTH = 64  # far beyond any spec or config; PyYAML itself recurses ~10 frames per level
MAX_NODES = 100_000  # scalars, lists and mappings after expanding every alias


def read_text(path: str | Path, what: str = "job spec") -> str:
    """The text of the file PATH. Only a regular file is read, and at most
    ``launcher.core.regular.DEFAULT_LIMIT`` bytes of it: a FIFO, a device or a socket is refused
    without blocking, a larger file is refused (``launcher.core.regular.read_regular``)."""
    p = Path(path)
    try:
        return read_regular(p, f"{what} file").decode("utf-8")
    except NotReadable as e:
        raise SpecError(str(p), [("", str(e))]) from None
    except FileNotFoundError:
        raise SpecError(str(p), [("", f"{what} file not found")]) from None
    except IsADirectoryError:
        raise SpecError(str(p), [("", f"expected a {what} file, got a directory")]) from None
    except PermissionError:
        raise SpecError(str(p), [("", f"{what} file is not readable (permission denied)")]) from None
    except UnicodeDecodeError as e:
        raise SpecError(str(p), [("", f"{what} file is not UTF-8 text ({e.reason} at byte {e.start})")]) from None
    except ValueError as e:  # a NUL byte in the path
        raise SpecError(repr(str(p)), [("", f"cannot open the {what} file: {e}")]) from None


class _Refused(ComposerError):
    pass


class _StrictComposing:
    """Composer hooks that refuse duplicate keys, deep nesting and alias bombs while composing."""

    _depth = 0
    _sizes: dict


    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = super().compose_node(parent, index)
            if not isinstance(node, ScalarNode) and id(node) not in self._sizes:
                # the anchored collection is still being composed: the alias is inside it
                raise _Refused(None, None, f"the alias *{event.anchor} refers to a node that contains it "
                                           "(a recursive structure)", event.start_mark)
            return node
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _Refused(None, None, f"nesting deeper than {MAX_DEPTH} levels", self.peek_event().start_mark)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        self._size(node)
        if isinstance(node, MappingNode):
            _no_duplicate_keys(node)
        return node

    def _size(self, node) -> int:
        if isinstance(node, ScalarNode):
            n = 1
        elif isinstance(node, SequenceNode):
            n = 1 + sum(self._sizes.get(id(c), 1) for c in node.value)
        else:
            n = 1 + sum(self._sizes.get(id(k), 1) + self._sizes.get(id(v), 1) for k, v in node.value)
        self._sizes[id(node)] = n
        if n > MAX_NODES:
            raise _Refused(None, None, f"the document expands to more than {MAX_NODES:,} values "
                                       "(aliases counted as what they repeat): refused", node.start_mark)
        return n


class StrictLoader(_StrictComposing, yaml.SafeLoader):
    """SafeLoader (pure Python) with the strict composing checks."""

    def __init__(self, stream):
        super().__init__(stream)
        self._sizes = {}  # id(node) -> its size with aliases expanded


def _no_duplicate_keys(node: MappingNode) -> None:
    seen: dict = {}
    for key, _value in node.value:
        if not isinstance(key, ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
            continue
        ident = (key.tag, key.value)
        if ident in seen:
            first = seen[ident]
            raise _Refused(None, None, f"duplicate key '{key.value}' (first at line {first.start_mark.line + 1}, "
                                       f"again at line {key.start_mark.line + 1}): remove one", key.start_mark)
        seen[ident] = key


def _source_line(text: str, mark) -> str:
    lines = text.splitlines()
    if mark is None or not 0 <= mark.line < len(lines):
        return ""
    line = lines[mark.line]
    if len(line) > 120:
        return ""
    return f"\n      {line}\n      {' ' * mark.column}^"


def syntax_message(e: yaml.MarkedYAMLError, text: str) -> str:
    """Point at the construct that was left open (the unclosed bracket or quote), not only at
    where the parser gave up, which is usually the line after it."""
    pm, cm = e.problem_mark, e.context_mark
    if isinstance(e, _Refused):
        return f"line {pm.line + 1}, column {pm.column + 1}: {e.problem}"
    at = lambda m: f"line {m.line + 1}, column {m.column + 1}"  # noqa: E731
    if cm is not None and e.context and pm is not None and (cm.line, cm.column) != (pm.line, pm.column):
        what = e.context.removeprefix("while ").removeprefix("parsing ").removeprefix("scanning ")
        return (f"YAML syntax error at {at(cm)}: {what} that starts here is not closed or is malformed "
                f"({e.problem} at {at(pm)}){_source_line(text, cm)}")
    mark = pm or cm
    where = at(mark) if mark else "unknown position"
    return f"YAML syntax error at {where}: {e.problem or e.context}{_source_line(text, mark)}"


def load_yaml(text: str, source: str):
    """Parse YAML; return (data, line_of) where line_of(path_tuple) -> 'line L' or ''."""
    loader = StrictLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as e:
        raise SpecError(source, [("", syntax_message(e, text))]) from None
    except yaml.YAMLError as e:
        raise SpecError(source, [("", f"YAML error: {e}")]) from None
    except RecursionError:  # belt and braces: MAX_DEPTH should stop it first
        raise SpecError(source, [("", f"nesting too deep (more than {MAX_DEPTH} levels)")]) from None
    finally:
        loader.dispose()
    return data, _line_finder(node)


def _line_finder(node):
    def line_of(path) -> str:
        cur = node
        for i, key in enumerate(path):
            if isinstance(cur, MappingNode):
                nxt = None
                for k, v in cur.value:
                    if str(k.value) == str(key):
                        nxt = v if i != len(path) - 1 else k
                        break
                if nxt is None:
                    break
                cur = nxt
            elif isinstance(cur, SequenceNode) and isinstance(key, int) and key < len(cur.value):
                cur = cur.value[key]
            else:
                break
        if cur is None or cur is node:
            return ""
        return f"line {cur.start_mark.line + 1}"

    return line_of
