"""YAML loading with errors that point at a line and column, and a map from field
paths (``resources.nodes``) to the line they were written on."""

from __future__ import annotations

from pathlib import Path

import yaml

from .errors import SpecError


def read_text(path: str | Path, what: str = "job spec") -> str:
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(str(p), [("", f"{what} file not found")]) from None
    except IsADirectoryError:
        raise SpecError(str(p), [("", f"expected a {what} file, got a directory")]) from None
    except PermissionError:
        raise SpecError(str(p), [("", f"{what} file is not readable (permission denied)")]) from None
    except UnicodeDecodeError as e:
        raise SpecError(str(p), [("", f"{what} file is not UTF-8 text ({e.reason} at byte {e.start})")]) from None


def load_yaml(text: str, source: str):
    """Parse YAML; return (data, line_of) where line_of(path_tuple) -> 'line L' or ''."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        msg = f"YAML syntax error at {where}: {e.problem or e.context}"
        raise SpecError(source, [("", msg)]) from None
    except yaml.YAMLError as e:
        raise SpecError(source, [("", f"YAML error: {e}")]) from None

    def line_of(path) -> str:
        cur = node
        for key in path:
            if isinstance(cur, yaml.MappingNode):
                nxt = None
                for k, v in cur.value:
                    if str(k.value) == str(key):
                        nxt = v if key != path[-1] else k
                        break
                if nxt is None:
                    break
                cur = nxt
            elif isinstance(cur, yaml.SequenceNode) and isinstance(key, int) and key < len(cur.value):
                cur = cur.value[key]
            else:
                break
        if cur is None or cur is node:
            return ""
        return f"line {cur.start_mark.line + 1}"

    return data, line_of
