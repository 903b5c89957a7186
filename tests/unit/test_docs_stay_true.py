"""The docs stay true (issue 34 §5): every page under docs/ is reachable from the README's
documentation table; every YAML block of the README and docs/ parses, and every job spec and
config among them validates (a fragment of a spec, such as ``checkpoint: {...}``, as a spec of
its own); no line is longer than 120 characters (a table row aside: Markdown cannot wrap one);
and the README's layers table is the import-linter contract of pyproject.toml."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml

from launcher.backend.config import ConfigFile
from launcher.backend.registry import default_registry
from launcher.backend.sections import parse_spec, spec_model
from launcher.spec.validation import validate_model

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MAX_LINE = 120

_FENCE = re.compile(r"^\s*(```|~~~)\s*(\w*)\s*$")
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)")


def section(text: str, heading: str) -> str:
    """The lines of TEXT under the ``## HEADING`` up to the next heading of that level."""
    m = re.search(rf"^## {re.escape(heading)}\s*$(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, f"no '## {heading}' section"
    return m.group(1)


def yaml_blocks(path: Path):
    """(line number of the fence, text) of every ```yaml block of PATH."""
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m:
            j = i + 1
            while j < len(lines) and not _FENCE.match(lines[j]):
                j += 1
            if m.group(2) in ("yaml", "yml"):
                yield i + 1, "\n".join(lines[i + 1:j])
            i = j
        i += 1


def _blocks():
    return [(p, n, text) for p in [README, *DOCS] for n, text in yaml_blocks(p)]


def _id(block) -> str:
    return f"{block[0].relative_to(ROOT)}:{block[1]}"


# ---- every page is linked from the README's table -----------------------------------------

def test_every_docs_page_is_linked_from_the_readmes_documentation_table():
    table = section(README.read_text(encoding="utf-8"), "Documentation")
    linked = {Path(t).name for t in _LINK.findall(table) if t.startswith("docs/")}
    assert [p.name for p in DOCS if p.name not in linked] == []


# ---- YAML blocks parse; specs and configs validate ------------------------------------------

def check_block(text: str, source: str = "<block>") -> str:
    """Parse TEXT and validate it as what it is; returns what it was taken for ("spec", "spec
    fragment", "config", "targets", "other"). Raises on YAML that does not parse or a spec or
    config that does not validate."""
    data = yaml.safe_load(text)
    if not isinstance(data, dict) or not data:
        return "other"
    keys, spec_keys, config_keys = set(data), set(spec_model().model_fields), set(ConfigFile.model_fields)
    # ``targets`` is both: a list of names in a spec, a mapping of targets in a config
    if keys <= config_keys and (isinstance(data.get("targets"), dict) or not keys <= spec_keys):
        validate_model(ConfigFile, data, source)
        _check_targets(data.get("targets") or {}, source)
        return "config"
    if keys <= spec_keys:
        kind = "spec" if "run" in data else "spec fragment"
        parse_spec({"name": "doc", "run": "true", **data}, source)
        return kind
    if all(isinstance(v, dict) and "backend" in v for v in data.values()):  # targets to paste under targets:
        _check_targets(data, source)
        return "targets"
    return "other"


def _check_targets(targets: dict, source: str) -> None:
    reg = default_registry()
    for name, raw in targets.items():
        model = getattr(reg.load_class(raw["backend"]), "target_options", None)
        if model is not None:
            validate_model(model, {k: v for k, v in raw.items() if k != "backend"}, f"{source}: targets.{name}")


@pytest.mark.parametrize("block", _blocks(), ids=_id)
def test_every_yaml_block_parses_and_every_spec_or_config_validates(block):
    path, line, text = block
    check_block(text, _id(block))


def test_the_docs_show_specs_and_configs_not_only_other_yaml():
    kinds = [check_block(text) for _, _, text in _blocks()]
    assert kinds.count("spec") >= 3 and "spec fragment" in kinds and "config" in kinds, kinds


def test_the_block_check_catches_bad_yaml_a_bad_spec_and_a_bad_config():
    with pytest.raises(yaml.YAMLError):
        check_block("checkpoint: {root: /r, local: /scratch/node-{node}}\n")
    with pytest.raises(Exception, match="resources.nodes"):
        check_block("name: x\nrun: y\nresources: {nodes: zero}\n")
    with pytest.raises(Exception, match="keep"):
        check_block("checkpoint: {root: /r, keep: many}\n")
    with pytest.raises(Exception, match="ssh_prot"):
        check_block("targets:\n  cl: {backend: slurm, ssh_prot: 22}\n")
    assert check_block("resources: {nodes: 2}\ncheckpoint: {root: /r, local: '/scratch/n-{node}', peers: 1}\n") \
        == "spec fragment"


# ---- line length ------------------------------------------------------------------------------

def long_lines(path: Path) -> list[str]:
    return [f"{path.relative_to(ROOT)}:{n}: {len(line)} characters"
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if len(line) > MAX_LINE and not line.lstrip().startswith("|")]


def test_no_docs_line_is_longer_than_120_characters_tables_aside():
    assert [hit for p in [README, *DOCS] for hit in long_lines(p)] == []


# ---- no test count --------------------------------------------------------------------------------

# "1,625 tests", "412 unit tests", "98 passed", "tests: 1625": a count of the suite, stale by the next commit
_TEST_COUNT = re.compile(r"\b\d[\d,]*\s+(?:(?:unit|integration|e2e)\s+)?tests\b|\b\d[\d,]*\s+passed\b|"
                         r"\btests:\s*\d", re.IGNORECASE)


def test_counts(text: str) -> list[str]:
    return [f"{n}: {m.group(0)}" for n, line in enumerate(text.splitlines(), 1) for m in _TEST_COUNT.finditer(line)]


test_counts.__test__ = False  # a helper, not a test


def test_no_docs_page_states_how_many_tests_there_are():
    """A count of the tests goes stale with the next test added: ``scripts/test`` prints each
    tier's pytest line instead (docs/testing.md)."""
    assert [f"{p.relative_to(ROOT)}:{hit}" for p in [README, *DOCS] for hit in test_counts(p.read_text("utf-8"))] == []


def test_the_test_count_check_catches_the_forms_a_count_takes():
    text = "the CI run: 1,625 tests\n412 unit tests\n98 passed in 6 min\ntests: 1625\nthe tests of a tier\n3 testers"
    assert [hit.split(": ", 1)[1] for hit in test_counts(text)] == ["1,625 tests", "412 unit tests", "98 passed",
                                                                   "tests: 1"]


# ---- the README's layers are pyproject's -------------------------------------------------------

def readme_layers() -> list[list[str]]:
    """The layers table of the README, top to bottom: rows of ``a`` > ``b`` and ``c`` \\| ``d``."""
    text = README.read_text(encoding="utf-8")
    m = re.search(r"^\| layer \(top to bottom\) \|.*?\n\|[-| ]+\|\n((?:\|.*\n)+)", text, re.M)
    assert m, "no layers table in the README"
    layers = []
    for row in m.group(1).splitlines():
        first = row.split(" | ")[0].lstrip("| ")
        for layer in first.split(">"):
            layers.append(sorted(re.findall(r"`([^`]+)`", layer)))
    return layers


def pyproject_layers() -> list[list[str]]:
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (contract,) = [c for c in conf["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    return [sorted(m.strip().removeprefix("launcher.") for m in layer.split("|")) for layer in contract["layers"]]


def test_the_readmes_layers_table_is_the_import_linter_contract():
    assert readme_layers() == pyproject_layers()
