import pytest

from launcher.core.errors import SpecError
from launcher.backend.sections import load_spec, spec_from_text


def problems(text):
    with pytest.raises(SpecError) as ei:
        spec_from_text(text, "job.yaml")
    return ei.value.problems


def test_a_minimal_spec_is_plain_data_built_in_one_line():
    spec = spec_from_text("name: x\nrun: echo hi\n")
    assert spec.resources.nodes == 1 and spec.checkpoint.root is None and spec.targets == []


def test_unknown_key_is_rejected_with_its_path_and_a_suggestion():
    (path, msg), = problems("name: x\nrun: y\nresources: {nodse: 2}\n")
    assert path == "resources.nodse"
    assert "did you mean 'nodes'" in msg and "line 3" in msg


def test_unknown_top_level_key_suggests_the_close_field():
    (path, msg), = problems("name: x\nrun: y\ncheckpoints: {root: /x}\n")
    assert path == "checkpoints" and "did you mean 'checkpoint'" in msg


def test_every_error_is_listed_not_just_the_first():
    probs = problems("name: x\nrun: y\nresources: {nodes: zero, time_limit: 60, memory_per_node: lots}\n")
    paths = sorted(p for p, _ in probs)
    assert paths == ["resources.memory_per_node", "resources.nodes", "resources.time_limit"]


def test_wrong_type_names_the_field_and_what_was_given():
    (path, msg), = problems("name: x\nrun: y\nresources: {nodes: [1, 2]}\n")
    assert path == "resources.nodes" and "integer" in msg


def test_missing_required_fields_are_named():
    paths = sorted(p for p, _ in problems("resources: {nodes: 1}\n"))
    assert paths == ["name", "run"]


@pytest.mark.parametrize("text,seconds", [("90m", 5400), ("24h", 86400), ("1-00:00:00", 86400),
                                          ("30s", 30), ("02:30:00", 9000), ("2d", 172800), ("1.5h", 5400)])
def test_durations_parse_with_units(text, seconds):
    spec = spec_from_text(f"name: x\nrun: y\nresources: {{time_limit: '{text}'}}\n")
    assert spec.resources.time_limit == seconds


@pytest.mark.parametrize("bad", ["60", "ten minutes", "5x", "-3h"])
def test_bad_durations_say_what_is_expected(bad):
    (path, msg), = problems(f"name: x\nrun: y\nresources: {{time_limit: {bad}}}\n")
    assert path == "resources.time_limit" and "duration with a unit" in msg


@pytest.mark.parametrize("text,nbytes", [("512GB", 512 * 1024**3), ("512G", 512 * 1024**3),
                                         ("16GiB", 16 * 1024**3), ("900MB", 900 * 1024**2), ("1.5T", int(1.5 * 1024**4))])
def test_sizes_parse_like_slurm_reads_them(text, nbytes):
    spec = spec_from_text(f"name: x\nrun: y\nresources: {{memory_per_node: {text}}}\n")
    assert spec.resources.memory_per_node == nbytes


def test_bare_size_is_rejected():
    (path, msg), = problems("name: x\nrun: y\nresources: {memory_per_node: 512}\n")
    assert "size with a unit" in msg


def test_env_values_may_hold_any_characters():
    spec = spec_from_text('name: x\nrun: y\nenv: {A: "$(rm -rf /) `id` \'q\' \\"d\\" ;\\nü", PORT: 80, FLAG: true}\n')
    assert spec.env == {"A": "$(rm -rf /) `id` 'q' \"d\" ;\nü", "PORT": "80", "FLAG": "true"}


def test_env_names_must_be_variable_names_and_not_reserved():
    probs = problems("name: x\nrun: y\nenv: {'bad name': 1}\n")
    assert probs[0][0] == "env.bad name" and "not a valid variable name" in probs[0][1]
    probs = problems("name: x\nrun: y\nenv: {LAUNCHER_ATTEMPT: 3}\n")
    assert probs[0][0] == "env.LAUNCHER_ATTEMPT" and "reserved" in probs[0][1]


def test_secrets_are_names_only():
    (path, msg), = problems("name: x\nrun: y\nsecrets: ['hf_abc def']\n")
    assert path == "secrets[0]" and "name of an environment variable" in msg


def test_yaml_syntax_error_has_line_and_column(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("name: x\nrun: [unclosed\nresources: {}\n")
    with pytest.raises(SpecError) as ei:
        load_spec(f)
    (path, msg), = ei.value.problems
    assert "YAML syntax error at line" in msg and "column" in msg and str(f) in str(ei.value)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(SpecError) as ei:
        load_spec(tmp_path / "nope.yaml")
    assert "not found" in str(ei.value) and "nope.yaml" in str(ei.value)


def test_top_level_must_be_a_mapping():
    (path, msg), = problems("- a\n- b\n")
    assert "mapping" in msg


def test_segment_and_switches_are_exclusive():
    probs = problems("name: x\nrun: y\ntopology: {segment: 2, max_switches: 1}\n")
    assert "either segment" in probs[0][1]


def test_checkpoint_root_must_be_posix_or_s3():
    (path, msg), = problems("name: x\nrun: y\ncheckpoint: {root: 'gs://b/x'}\n")
    assert path == "checkpoint.root"
    assert spec_from_text("name: x\nrun: y\ncheckpoint: {root: 's3://my-bucket/runs/a'}\n").checkpoint.root


def test_seed_from_the_spec_is_the_one_exported():
    from launcher.provenance.seed import choose_seed

    spec = spec_from_text("name: x\nrun: y\nseed: 1234\n")
    assert choose_seed(spec)[0] == 1234
