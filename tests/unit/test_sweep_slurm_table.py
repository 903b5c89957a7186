"""The Slurm sweep table is exactly the text of quoting each element's ``element_env`` value by value."""

from __future__ import annotations

import pytest

from launcher.backend.protocols import JobRef
from launcher.backend.sections import parse_spec
from launcher.spec.sweep_elements import element_env, elements, sweep_seed_of
from launcher.backend.templating import comment_text
from launcher_backends.slurm.array import line_quote, sweep_table

HOSTILE = ["$(touch PWNED)", "`x`", "it's \"quoted\"", "first\nsecond\n", "cr\rlf", "tab\there", "${HOME} \\",
           "naïve — 日本", "' ; touch q ; '", "", "\x7f\x01", "\u2028"]


def reference_table(spec, job: JobRef) -> str:
    """The table as each element's environment quoted one value at a time."""
    els = elements(spec.sweep)
    seed = sweep_seed_of(spec, job.seed)
    sweep_id = job.sweep_id or job.job_id
    out = [f"# launcher sweep table of {comment_text(sweep_id)}: {len(els)} elements; line 2 + i exports "
           f"element i's variables (bash, every value quoted)"]
    for e in els:
        env = element_env(sweep_id, e, len(els), seed, spec.checkpoint.root)
        out.append("export " + " ".join(f"{k}={line_quote(v)}" for k, v in env.items()))
    return "\n".join(out) + "\n"


SWEEPS = [
    {"grid": {"lr": [1.0e-4, 3.0e-4, 0.1, 2.0], "b": [32, 64], "amp": [True, False], "tag": HOSTILE}},
    {"points": [{"v": 0.0, "w": 1}, {"v": -0.0, "w": True}, {"v": 1.0, "w": "1"}, {"v": 1, "w": 1.0},
                {"v": 1.0, "w": 1}]},
    {"random": {"n": 40, "seed": 3, "space": {"lr": {"loguniform": [1.0e-5, 1.0e-2]}, "d": {"uniform": [0, 0.5]},
                                             "k": {"int": [1, 4]}, "c": {"choice": ["a b", 7, False, "$x"]}}}},
]


@pytest.mark.parametrize("sweep", SWEEPS)
@pytest.mark.parametrize("extra", [{}, {"checkpoint": {"root": "/ck dir/it's"}},
                                   {"checkpoint": {"root": "s3://bucket-x/p/"}}, {"seed": 12}])
def test_the_table_is_each_elements_environment_quoted(sweep, extra):
    spec = parse_spec({"name": "sw", "run": "true", "sweep": sweep, **extra})
    for job in (JobRef("sw-1", 1, "/j", seed=5), JobRef("sw-1-e3", 2, "/j", seed=None, sweep_id="sw 'odd'")):
        assert sweep_table(spec, job) == reference_table(spec, job)
