"""Many JSON texts that differ in a few top-level values (a sweep's 1,000 element handles,
their "submitted" events), with the common part dumped once."""

from __future__ import annotations

import json


def dumps_varying(obj: dict, varying: dict, **kw) -> list[str]:
    """``json.dumps({**OBJ, k: VARYING[k][i] for k}, **KW)`` for every i: OBJ with a marker
    in each varying key is dumped once, and each text is put together from its pieces and
    the varying values dumped alone. Exactly the texts the plain loop makes (it is used
    instead when a marker cannot be found once, as in an OBJ that holds the marker text)."""
    keys = list(varying)
    n = len(varying[keys[0]]) if keys else 0
    ascii_ = kw.get("ensure_ascii", True)
    marks = {k: f"\x00varying {i}\x00" for i, k in enumerate(keys)}
    text = json.dumps({**obj, **marks}, **kw)
    spots = [(text.find(json.dumps(m, ensure_ascii=ascii_)), k) for k, m in marks.items()]
    if any(text.count(json.dumps(marks[k], ensure_ascii=ascii_)) != 1 for k in keys):
        return [json.dumps({**obj, **{k: varying[k][i] for k in keys}}, **kw) for i in range(n)]
    spots.sort()
    pieces, at = [], 0
    for pos, k in spots:
        pieces.append(text[at:pos])
        at = pos + len(json.dumps(marks[k], ensure_ascii=ascii_))
    tail = text[at:]
    columns = [[json.dumps(v, ensure_ascii=ascii_) for v in varying[k]] for _, k in spots]
    out = []
    for values in zip(*columns):
        out.append("".join(p + v for p, v in zip(pieces, values)) + tail)
    return out
