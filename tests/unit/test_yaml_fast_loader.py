"""The libyaml-backed loader composes through the same strict checks as the pure-Python one."""

import pytest
import yaml

from launcher.spec import yamlio



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
    saved = yamlio._C_LOADER
    try:
        yamlio._C_LOADER = None
        with pytest.raises(Exception) as slow_err:
            yamlio.load_yaml(text, "s.yaml")
    finally:
        yamlio._C_LOADER = saved
    assert str(fast_err.value) == str(slow_err.value)


def _deep(k: int, inner: str = "1") -> str:
    return "[" * k + inner + "]" * k


def _chain(levels: int) -> str:
    """An alias chain whose expanded size is 11, 111, 1111, ... at each level."""
    names = "abcdefgh"[:levels]
    text = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
    return text + "".join(f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip(names, names[1:]))


EDGES = [
    "", "# only a comment\n", "---\n...\n", "a: 1\n---\nb: 2\n", "a: &x 1\nb: &x 2\n", "a: &x 1\nb: *x\n",
    "a: *nowhere\n", "a: &x {b: *x}\n", "a: &x [1, [2, *x]]\n", "a: 1\n'a': 2\n", "a: 1\n\"a\": 2\n",
    "? [a, b]\n: 1\n", "a: !!str 1\nb: !!int '2'\n", "a: !custom x\n", "[1, 2, {x: y}]\n", "just a string\n",
    "a: " + _deep(62) + "\n", "a: " + _deep(63) + "\n", _deep(63) + "\n", _deep(64) + "\n",
    "a: &x " + _deep(60) + "\nb: " + _deep(10, "*x") + "\n",  # an alias deeper than where its anchor is written
    "a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 64)) + "  " * 64 + "v: 1\n",
    "a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 62)) + "  " * 62 + "v: 1\n",
    _chain(4), _chain(5), "base: &b {x: 1}\nm: {<<: [*b, {y: 2}], x: 3}\n", "a: [1, 2\n", "{a: 1, a: 2}\n",
    "a: {b: 1, c: {b: 2, b: 3}}\n", "x: &s 'str'\ny: [*s, *s, *s]\n",
]


def _pure(text):
    saved = yamlio._C_LOADER
    try:
        yamlio._C_LOADER = None
        return yamlio.load_yaml(text, "s.yaml")[0], None
    except Exception as e:  # noqa: BLE001 - whatever the pure loader says is the reference
        return None, str(e)
    finally:
        yamlio._C_LOADER = saved


def _same_tree(a, b, seen=None) -> bool:
    seen = set() if seen is None else seen
    if (id(a), id(b)) in seen:
        return True
    seen.add((id(a), id(b)))
    if type(a) is not type(b) or a.tag != b.tag or (a.start_mark.line, a.start_mark.column) != \
            (b.start_mark.line, b.start_mark.column):
        return False
    if isinstance(a, yaml.ScalarNode):
        return a.value == b.value and (a.style or '') == (b.style or '')  # plain: None in Python, '' in C
    if len(a.value) != len(b.value):
        return False
    pairs = zip(a.value, b.value) if isinstance(a, yaml.SequenceNode) else \
        [p for (ka, va), (kb, vb) in zip(a.value, b.value) for p in ((ka, kb), (va, vb))]
    return all(_same_tree(x, y, seen) for x, y in pairs)


def _corpus():
    from pathlib import Path

    root = Path(__file__).parents[2]
    files = sorted(p for d in ("tests", "examples", "docs") for p in (root / d).rglob("*.y*ml") if p.is_file())
    return [p.read_text(errors="replace") for p in files] + EDGES


@pytest.mark.parametrize("text", _corpus())
def test_libyaml_composing_accepts_and_refuses_exactly_what_the_pure_loader_does(text):
    data, error = _pure(text)
    fast = yamlio._load_fast(text)
    if error is not None:
        assert fast is None
        with pytest.raises(Exception) as got:
            yamlio.load_yaml(text, "s.yaml")
        assert str(got.value) == error
        return
    assert fast is not None and fast[1] == data
    loader = yamlio.StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            loader.construct_document(node)  # merge keys are flattened into the node, as in fast[0]
    finally:
        loader.dispose()
    assert (node is None and fast[0] is None) or _same_tree(node, fast[0])
