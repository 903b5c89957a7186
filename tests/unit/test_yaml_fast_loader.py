"""The libyaml-backed loader composes through the same strict checks as the pure-Python one."""

import pytest
import yaml

from launcher import yamlio



@pytest.fixture(autouse=True)
def _libyaml():
    """PyPI's PyYAML wheels carry libyaml (the fast path); a build without it falls back to
    the pure-Python loader, which the rest of the suite covers: here that is a failure, not
    a skip, so a test environment without the fast path cannot pass these silently."""
    assert yaml.__with_libyaml__, "this PyYAML has no libyaml: install PyYAML from a wheel that carries it"

DOCS = [
    "name: a\nrun: 'true'\nsweep: {grid: {x: [1, 2, 3]}, max_parallel: 2}\n",
    "base: &b {x: 1, y: [a, b]}\nother: *b\nmerged: {<<: *b, z: 3}\n",
    "a: 2024-01-01\nb: 0x1f\nc: ~\nd: yes\ne: 1.5e3\nf: '07'\n",
]


@pytest.mark.parametrize("text", DOCS)
def test_same_data_and_lines_as_the_pure_python_loader(text):
    fast = yamlio._load_fast(text)
    assert fast is not None
    loader = yamlio.StrictLoader(text)
    try:
        assert fast[1] == loader.construct_document(loader.get_single_node())
    finally:
        loader.dispose()
    data, line_of = yamlio.load_yaml(text, "s.yaml")
    assert data == fast[1]
    assert line_of((list(data)[-1],)) == f"line {len(text.splitlines())}"


@pytest.mark.parametrize("text", ["a: 1\nb: 2\na: 3\n", "a: &x [*x]\n", "x: [1, 2\n",
                                  "a: &a [1,1,1,1,1,1,1,1,1,1]\n" + "".join(
                                      f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n"
                                      for p, c in zip("abcdef", "bcdefg"))])
def test_refusals_fall_back_to_the_worded_errors(text):
    assert yamlio._load_fast(text) is None  # refused in C parsing or by the strict composer
    with pytest.raises(Exception) as fast_err:
        yamlio.load_yaml(text, "s.yaml")
    saved = yamlio._C_PARSER
    try:
        yamlio._C_PARSER = ()
        with pytest.raises(Exception) as slow_err:
            yamlio.load_yaml(text, "s.yaml")
    finally:
        yamlio._C_PARSER = saved
    assert str(fast_err.value) == str(slow_err.value)
