"""A sweep launch stores each element's meta from ``element_texts``: byte for byte what
``begin_sweep`` stores from ``element_rows`` (each meta trimmed by ``own_meta`` and dumped)."""

from __future__ import annotations

import json

import pytest

from launcher.backend.sections import parse_spec
from launcher.state.sweeps import own_meta, shared_of
from launcher.sweep.launching import element_rows
from launcher.sweep.rowtexts import element_texts

HOSTILE = ["$(touch PWNED)", "it's \"quoted\"", "first\nsecond\n", "naïve — 日本", "\\", "", "\x7f\x01", "😀"]
SWEEPS = [
    {"grid": {"lr": [1.0e-4, 3.0e-4, 0.1, 2.0, 1.0e300], "b": [32, -64, 10 ** 20], "amp": [True, False],
              "tag": HOSTILE}},
    {"points": [{"v": 0.0, "w": 1}, {"v": -0.0, "w": True}, {"v": 1.0, "w": "1"}, {"v": 1, "w": 1.0},
                {"v": 1.0, "w": 1}, {"v": False, "w": 0}]},
    {"random": {"n": 40, "seed": 3, "space": {"lr": {"loguniform": [1.0e-5, 1.0e-2]}, "d": {"uniform": [0, 0.5]},
                                             "k": {"int": [1, 4]}, "c": {"choice": ["a b", 7, False, "$x"]}}}},
]


@pytest.mark.parametrize("sweep", SWEEPS)
@pytest.mark.parametrize("extra", [{}, {"checkpoint": {"root": "/ck dir/it's"}},
                                   {"checkpoint": {"root": "s3://bucket-x/p/"}}, {"seed": 12}])
@pytest.mark.parametrize("sweep_id,seed,base", [("sw-1", 7, "/base"), ("sw \"é\"", None, "/b/ä")])
def test_the_texts_are_what_begin_sweep_stores_of_the_element_rows(sweep, extra, sweep_id, seed, base):
    spec = parse_spec({"name": "sw", "run": "true", "sweep": sweep, **extra})
    rows = element_rows(sweep_id, spec, seed, base)
    shared, texts = element_texts(sweep_id, spec, seed, base)
    assert shared == shared_of(rows[0]["meta"])
    assert [tuple(t) for t in texts] == [(r["job_id"], r["index"], r["ckpt_root"],
                                          json.dumps(own_meta(r["meta"], shared))) for r in rows]
