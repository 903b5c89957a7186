"""Many JSON texts that differ in a few top-level values (a sweep's 1,000 element handles,
their "submitted" events), with the common part dumped once."""

from __future__ import annotations

import json
from typing import Optional


def split_at(text: str, marks: list) -> Optional[list]:
    """TEXT cut at each of MARKS, which must each occur exactly once and in this order: the
    len(MARKS) + 1 pieces around them, or None."""
    pieces, at = [], 0
    for m in marks:
        pos = text.find(m, at)
        if pos < 0 or text.count(m) != 1:
            return None
        pieces.append(text[at:pos])
        at = pos + len(m)
    return pieces + [text[at:]]


def dumps_varying(obj: dict, varying: dict, **kw) -> list[str]:
    """``json.dumps({**OBJ, k: VARYING[k][i] for k}, **KW)`` for every i: OBJ with a marker
    in each varying key is dumped once, and each text is put together from its pieces and
    the varying values dumped alone. Exactly the texts the plain loop makes (it is used
    instead when a marker cannot be found once, as in an OBJ that holds the marker text)."""
    keys = list(varying)
    n = len(varying[keys[0]]) if keys else 0
    template = Template.of(obj, keys, **kw)
    if template is None:
        return [json.dumps({**obj, **{k: varying[k][i] for k in keys}}, **kw) for i in range(n)]
    return template.fill_columns(varying)


class Template:
    """A dict's JSON text with holes in some top-level keys: filled with values dumped alone,
    it is exactly ``json.dumps({**obj, **values}, **kw)`` (the dumping of everything else is
    done once, e.g. while a scheduler answers, and filling costs next to nothing)."""

    def __init__(self, pieces: list, order: list, ensure_ascii: bool):
        self.pieces, self.order, self.ensure_ascii = pieces, order, ensure_ascii

    @classmethod
    def of(cls, obj: dict, keys, dumps=None, **kw) -> Optional["Template"]:
        """OBJ dumped with a hole in each of KEYS, or None when a hole cannot be told apart
        (OBJ holds the marker text). DUMPS: what makes the text (default ``json.dumps(obj, **KW)``;
        it must give the same text)."""
        keys = list(keys)
        ascii_ = kw.get("ensure_ascii", True)
        marks = {k: json.dumps(f"\x00varying {i}\x00", ensure_ascii=ascii_) for i, k in enumerate(keys)}
        holed = {**obj, **{k: json.loads(m) for k, m in marks.items()}}
        text = dumps(holed) if dumps is not None else json.dumps(holed, **kw)
        order = sorted(keys, key=lambda k: text.find(marks[k]))
        pieces = split_at(text, [marks[k] for k in order])
        return None if pieces is None else cls(pieces, order, ascii_)

    def fill(self, values: dict) -> str:
        if not self.order:
            return self.pieces[0]
        return self.fill_columns({k: [values[k]] for k in self.order})[0]

    def fill_columns(self, columns: dict) -> list[str]:
        pieces = self.pieces
        dumped = [[json.dumps(v, ensure_ascii=self.ensure_ascii) for v in columns[k]] for k in self.order]
        return ["".join(p + v for p, v in zip(pieces, values)) + pieces[-1] for values in zip(*dumped)]
