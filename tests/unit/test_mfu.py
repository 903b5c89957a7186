"""MFU against a named peak (issue 30 items 2 and 3): the peak table and its name lookups,
the spec fields, and the MFU / effective-MFU arithmetic of `launcher report` (pure)."""

from __future__ import annotations

import json
import random
import re

import pytest
from click.testing import CliRunner

from launcher.backend.sections import spec_from_text
from launcher.cli import main
from launcher.core.errors import SpecError
from launcher.plan import peaks
from launcher.plan.peaks import PeakUnknown, find, normalise, peak
from launcher.report import AttemptIn, History, Save, account
from launcher.report.mfu import combine, flops_between, kept_ranges, step_flops, summarize
from launcher.spec.model import JobSpec

# ---------------------------------------------------------------- the table

MAIN = ("tf32", "bf16", "fp16", "fp8")


def test_the_table_has_at_least_30_parts_each_with_a_dated_source_and_dense_figures():
    rows = peaks.rows()
    assert len(rows) >= 30
    vendors = {r.vendor for r in rows}
    assert {"NVIDIA", "AMD", "Google", "AWS", "Intel"} <= vendors
    for r in rows:
        assert r.source.startswith("https://"), r.name
        assert re.match(r"^\d{4}-\d{2}$", r.date), r.name
        assert r.dense is True, r.name
        assert set(r.tflops) >= set(MAIN) and any(r.tflops[p] for p in MAIN), r.name
        assert all(v is None or v > 0 for v in r.tflops.values()), r.name


def test_at_least_30_parts_have_four_precisions_or_more():
    four = [r.name for r in peaks.rows() if sum(v is not None for v in r.tflops.values()) >= 4]
    assert len(four) >= 30, (len(four), sorted(set(r.name for r in peaks.rows()) - set(four)))
    assert set(peaks.PRECISIONS) == {"fp32", "tf32", "bf16", "fp16", "fp8", "int8"}


@pytest.mark.parametrize("name,tflops", [
    ("A100", 19.5), ("H100", 67), ("H100 PCIe", 51), ("Tesla V100-SXM2-16GB", 15.7), ("T4", 8.1),
    ("MI250X", 95.7), ("AMD Instinct MI300X", 163.4)])
def test_fp32_is_the_datasheets_single_precision_figure(name, tflops):
    p = peak(name, "fp32")
    assert p.tflops == tflops and p.precision == "fp32" and p.describe().startswith("dense FP32 peak, ")


def test_a_part_without_an_fp32_figure_is_unknown_at_fp32_never_another_precisions():
    with pytest.raises(PeakUnknown, match=r"^peak unknown: B200: B200 has no dense FP32 figure"):
        peak("B200", "fp32")
    assert JobSpec(name="a", run="b", resources={"precision": "FP32"}).resources.precision == "fp32"


def test_every_alias_names_one_row_only():
    index = peaks._index()  # raises on an alias two rows share
    assert len(index) > len(peaks.rows())


@pytest.mark.parametrize("name,precision,tflops", [
    ("H100 SXM", "bf16", 989.4), ("H100 SXM", "fp8", 1978.9), ("H100 SXM", "tf32", 494.7),
    ("H100 PCIe", "bf16", 756.5), ("A100", "bf16", 312), ("A100", "tf32", 156), ("L4", "bf16", 121),
    ("L40S", "fp8", 733), ("MI300X", "bf16", 1307.4), ("TPU v5p", "bf16", 459), ("Trainium2", "fp8", 1299),
    ("B200", "bf16", 2250), ("GB200", "bf16", 2500), ("Gaudi 3", "bf16", 1835),
])
def test_figures_are_dense_never_the_sparse_datasheet_headline(name, precision, tflops):
    assert peak(name, precision).tflops == pytest.approx(tflops)


# ---------------------------------------------------------------- lookups

FORMS = [
    # SkyPilot accelerator names (with and without counts)
    ("H100", "H100 SXM"), ("H100:8", "H100 SXM"), ("H100-MEGA", "H100 SXM"), ("A100", "A100 SXM4"),
    ("A100-80GB", "A100 SXM4"), ("A100-80GB:8", "A100 SXM4"), ("V100", "V100 SXM2"), ("V100-32GB", "V100 SXM2"),
    ("L4", "L4"), ("L40S", "L40S"), ("A10G", "A10G"), ("T4", "T4"), ("H200", "H200 SXM"), ("B200", "B200"),
    ("GB200", "GB200"), ("GB300", "GB300"), ("B300", "B300"), ("MI300X", "MI300X"), ("tpu-v4-8", "TPU v4"),
    ("tpu-v5litepod-16", "TPU v5e"), ("tpu-v5p-8", "TPU v5p"), ("tpu-v6e-8", "TPU v6e (Trillium)"),
    ("Trainium", "Trainium (trn1)"), ("Trainium2", "Trainium2 (trn2)"),
    # Slurm GRES types (written by hand, and AutoDetect=nvml's)
    ("gpu:h100:8", "H100 SXM"), ("gres/gpu:a100:4", "A100 SXM4"), ("a100_80g", "A100 SXM4"), ("h100", "H100 SXM"),
    ("nvidia_h100_80gb_hbm3", "H100 SXM"), ("nvidia_a100-sxm4-80gb", "A100 SXM4"), ("nvidia_h100_pcie", "H100 PCIe"),
    ("nvidia_h100_nvl", "H100 NVL"), ("mi250x", "MI250X"), ("mi250x_gcd", "MI250X GCD"), ("gaudi2", "Gaudi 2"),
    ("gb300", "GB300"), ("b300", "B300"),
    # nvidia-smi / rocm-smi / hl-smi product names
    ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM4"), ("NVIDIA A100-SXM4-40GB", "A100 SXM4"),
    ("NVIDIA A100-PCIE-40GB", "A100 PCIe"), ("NVIDIA A100 80GB PCIe", "A100 PCIe"),
    ("Tesla V100-SXM2-16GB", "V100 SXM2"), ("Tesla V100-PCIE-32GB", "V100 PCIe"),
    ("Tesla V100S-PCIE-32GB", "V100S PCIe"),
    ("Tesla T4", "T4"), ("NVIDIA A10G", "A10G"), ("NVIDIA L4", "L4"), ("NVIDIA L40S", "L40S"),
    ("NVIDIA H200", "H200 SXM"), ("NVIDIA H200 NVL", "H200 NVL"), ("NVIDIA GH200 480GB", "GH200"),
    ("NVIDIA B200", "B200"), ("NVIDIA B300 SXM6 AC", "B300"), ("NVIDIA GB200", "GB200"), ("NVIDIA GB300", "GB300"),
    ("AMD Instinct MI300X", "MI300X"), ("AMD Instinct MI325X", "MI325X"), ("AMD Instinct MI355X", "MI355X"),
    ("HL-225", "Gaudi 2"), ("HL-325L", "Gaudi 3"), ("Intel Gaudi 3", "Gaudi 3"),
    # marketing and cloud names
    ("Trillium", "TPU v6e (Trillium)"), ("Ironwood", "TPU v7 (Ironwood)"), ("tpu7x", "TPU v7 (Ironwood)"),
    ("trn1.32xlarge", "Trainium (trn1)"), ("trn2", "Trainium2 (trn2)"), ("TPU v5e", "TPU v5e"),
]


@pytest.mark.parametrize("name,row", FORMS)
def test_every_name_form_finds_its_row_in_any_case(name, row):
    for form in (name, name.lower(), name.upper()):
        assert find(form).name == row, form


@pytest.mark.parametrize("name", ["GB300", "gb300", "NVIDIA GB300", "gb300_nvl72"])
def test_gb300_is_never_b300(name):
    assert find(name).name == "GB300" and peak(name).name == "GB300"
    assert peak(name).tflops == 2500 and peak("B300").tflops == 2250
    if "nvl72" not in name:
        assert find(name.replace("GB", "B").replace("gb", "b")).name == "B300"


def test_h100_pcie_and_nvl_never_find_the_sxm_row():
    assert peak("H100 PCIe").name == "H100 PCIe" and peak("h100-nvl").name == "H100 NVL"
    assert peak("H100").name == "H100 SXM"
    assert len({peak(n).tflops for n in ("H100", "H100 PCIe", "H100 NVL")}) == 3


@pytest.mark.parametrize("name", ["H100X", "H10", "B300X", "A100 PCI", "Gaudi", "MI300", "tpu-v9-8", "RTX 4090",
                                  "cpu", "", "X100"])
def test_an_unknown_name_is_peak_unknown_and_never_another_part(name):
    with pytest.raises(PeakUnknown) as ei:
        peak(name)
    assert str(ei.value).startswith(f"peak unknown: {name}")


def test_a_precision_the_part_lacks_is_peak_unknown_naming_what_it_has():
    with pytest.raises(PeakUnknown, match=r"^peak unknown: V100: V100 SXM2 has no dense BF16 figure .*FP16 125"):
        peak("V100", "bf16")
    assert peak("V100", "fp16").tflops == 125
    with pytest.raises(PeakUnknown, match="peak unknown: A100.*FP8"):
        peak("A100", "fp8")


def test_normalise_drops_vendor_words_memory_and_counts_only():
    assert normalise("NVIDIA H100 80GB HBM3") == "h100"
    assert normalise("gpu:h100:8") == "h100"
    assert normalise("Gaudi 2") == "gaudi2"
    assert normalise("GB300") == "gb300"


def test_the_output_names_the_peak():
    assert peak("H100 SXM").describe() == "dense BF16 peak, H100 SXM, 989 TFLOPS per GPU"
    assert peak("tpu-v5p-8").describe() == "dense BF16 peak, TPU v5p, 459 TFLOPS per chip"


# ---------------------------------------------------------------- the spec fields

def problems(text: str) -> list:
    with pytest.raises(SpecError) as ei:
        spec_from_text(text, "j.yaml")
    return ei.value.problems


def test_spec_fields_default_and_parse():
    s = spec_from_text("name: a\nrun: b\nresources: {accelerator: H100, precision: FP8, peak_tflops: 900}\n"
                       "model: {flops_per_token: 4.2e10}\n", "j.yaml")
    assert (s.resources.precision, s.resources.peak_tflops, s.model.flops_per_token) == ("fp8", 900.0, 4.2e10)
    d = JobSpec(name="a", run="b")
    assert d.resources.precision == "bf16" and d.resources.peak_tflops is None and d.model.flops_per_token is None


@pytest.mark.parametrize("text,field,words", [
    ("resources: {precision: fp4}", "resources.precision", "bf16"),
    ("resources: {peak_tflops: 0}", "resources.peak_tflops", "greater than 0"),
    ("resources: {peak_tflops: lots}", "resources.peak_tflops", "number"),
    ("model: {flops_per_token: -3}", "model.flops_per_token", "greater than 0"),
    ("model: {flops_per_tokens: 3}", "model.flops_per_tokens", "flops_per_token"),
    ("model: {params: 7e9}", "model.params", "unknown key"),
])
def test_bad_spec_fields_are_refused_naming_the_field(text, field, words):
    got = problems(f"name: a\nrun: b\n{text}\n")
    assert any(p[0] == field and words in p[1] for p in got), got


# ---------------------------------------------------------------- the arithmetic

def test_flops_between_counts_each_step_at_the_report_that_covers_it():
    pts = [(10, 2.0), (20, 3.0)]  # steps 1-10 cost 2, 11-20 cost 3, later ones 3
    assert flops_between(pts, 0, 10) == 20
    assert flops_between(pts, 0, 20) == 50
    assert flops_between(pts, 5, 15) == 5 * 2 + 5 * 3
    assert flops_between(pts, 20, 25) == 15
    assert flops_between(pts, 7, 7) == 0 and flops_between([], 0, 9) == 0


def test_tokens_times_flops_per_token_and_flops_win_over_tokens():
    pts, why = step_flops({1: {"tokens": 10}, 2: {"tokens": 10, "flops": 7}}, 3.0)
    assert pts == [(1, 30.0), (2, 7.0)] and why is None
    pts, why = step_flops({1: {"tokens": 10}}, None)
    assert pts == [] and "model.flops_per_token" in why
    pts, why = step_flops({1: {"loss": 0.3}}, None)
    assert pts == [] and "no model FLOPs reported" in why


def history():
    """Attempt 1 preempted (resumed from step 20 by attempt 2), attempt 2 crashed (attempt 3
    resumed from 40), attempt 3 completed at step 60."""
    return History("j", t0=0, now=1e9, gpus=8, attempts=[
        AttemptIn(1, "PREEMPTED", queued=0, started=5, ended=40, program_start=6, resume_step=-1, generation=1,
                  saves=[Save(16, 17, 10, True), Save(27, 28, 20, True), Save(37, 38, 30, True)]),
        AttemptIn(2, "NODE_FAIL", queued=40, started=50, ended=90, program_start=51, resume_step=20, generation=2,
                  saves=[Save(61, 62, 30, True), Save(72, 73, 40, True)]),
        AttemptIn(3, "COMPLETED", queued=90, started=100, ended=125, program_start=101, resume_step=40,
                  generation=3, saves=[Save(111, 112, 50, True), Save(122, 123, 60, True)]),
    ])


def spec(**resources):
    return JobSpec(name="a", run="b", resources={"nodes": 1, "gpus_per_node": 8, **resources})


def test_kept_flops_count_each_kept_step_once_and_mfu_names_the_peak():
    acc = account(history())
    metrics = {s: {"flops": 1e15, "loss": 1.0} for s in range(10, 61, 10)}
    c = summarize(acc, metrics, spec(accelerator="H100"))
    assert [(r["from_step"], r["to_step"]) for r in c["kept"]] == [(0, 20), (20, 40), (40, 60)]
    assert c["model_flops"] == pytest.approx(60 * 1e15)  # steps 21-30 of attempt 1 were recomputed: not counted
    peak_flops = 989.4e12 * 8
    useful = acc.totals["useful_compute"]
    paid = sum(a.billable_s for a in acc.attempts)
    assert c["mfu"] == pytest.approx(60e15 / (peak_flops * useful))
    assert c["effective_mfu"] == pytest.approx(60e15 / (peak_flops * paid))
    assert c["peak"] == {"name": "H100 SXM", "precision": "bf16", "tflops": 989.4, "per": "GPU", "dense": True,
                         "source": c["peak"]["source"]}
    assert c["peak"]["source"].startswith("https://")
    assert c["peak_text"] == "dense BF16 peak, H100 SXM, 989 TFLOPS per GPU"


def test_effective_mfu_is_mfu_times_the_useful_share_on_any_history():
    rng = random.Random(30)
    for _ in range(200):
        t, attempts, resume = 0.0, [], -1
        for n in range(1, rng.randint(1, 5) + 1):
            started = t + rng.uniform(0, 20)
            ps = started + rng.uniform(0, 5)
            saves, s, step = [], ps, max(resume, 0)
            for _ in range(rng.randint(0, 5)):
                s += rng.uniform(1, 10)
                step += rng.randint(1, 20)
                saves.append(Save(s, s + rng.uniform(0, 2), step, True))
                s += 2
            end = s + rng.uniform(0, 10)
            last = n == 5 or rng.random() < 0.3
            attempts.append(AttemptIn(n, "COMPLETED" if last else rng.choice(["PREEMPTED", "NODE_FAIL", "FAILED"]),
                                      queued=t, started=started, ended=end, program_start=ps, saves=saves,
                                      resume_step=resume, generation=n))
            if last:
                break
            kept = [x.step for x in saves]
            resume = rng.choice(kept) if kept else resume
            t = end
        acc = account(History("j", t0=0, now=1e9, gpus=4, attempts=attempts))
        top = max([0] + [x.step for a in attempts for x in a.saves])
        metrics = {s: {"flops": rng.uniform(1e12, 1e13)} for s in range(1, top + 1, rng.randint(1, 7))}
        c = summarize(acc, metrics, spec(accelerator="a100", gpus_per_node=4))
        if c["mfu"] is None:
            continue
        assert c["effective_mfu"] == pytest.approx(c["mfu"] * c["useful_share"], rel=1e-9)
        assert 0 <= c["effective_mfu"] <= c["mfu"]


def test_an_unknown_accelerator_gives_no_mfu_and_says_peak_unknown():
    acc = account(history())
    c = summarize(acc, {60: {"flops": 1e15}}, spec(accelerator="H100X"))
    assert c["mfu"] is None and c["effective_mfu"] is None and c["peak"] is None
    assert c["reason"].startswith("peak unknown: H100X")
    c = summarize(acc, {60: {"flops": 1e15}}, spec())
    assert c["mfu"] is None and c["reason"].startswith("peak unknown: resources.accelerator is not set")


def test_peak_tflops_overrides_the_table_and_precision_chooses_the_denominator():
    acc = account(history())
    m = {60: {"flops": 1e15}}
    c = summarize(acc, m, spec(accelerator="H100", peak_tflops=100))
    assert c["peak"]["tflops"] == 100 and c["peak"]["source"] == "resources.peak_tflops"
    fp8 = summarize(acc, m, spec(accelerator="H100", precision="fp8"))
    bf16 = summarize(acc, m, spec(accelerator="H100"))
    assert fp8["peak"]["tflops"] == pytest.approx(1978.9)
    assert bf16["mfu"] == pytest.approx(2 * fp8["mfu"], rel=1e-3)
    cpu = summarize(acc, m, JobSpec(name="a", run="b", resources={"nodes": 2, "peak_tflops": 1}))
    assert cpu["accelerators"] == 2 and cpu["mfu"] is not None  # per node without GPUs


def test_a_failed_attempt_that_committed_nothing_keeps_no_flops():
    acc = account(History("j", t0=0, now=1e9, gpus=1, attempts=[
        AttemptIn(1, "FAILED", queued=0, started=1, ended=30, program_start=2, resume_step=-1, generation=1),
        AttemptIn(2, "COMPLETED", queued=30, started=31, ended=60, program_start=32, resume_step=-1, generation=2,
                  saves=[Save(55, 56, 10, True)]),
    ]))
    ranges = kept_ranges(acc.attempts, [(10, 1.0)])
    assert [(r["from_step"], r["to_step"]) for r in ranges] == [(0, 0), (0, 10)]


def test_a_sweep_sums_kept_flops_and_peak_seconds_so_the_equality_holds():
    acc = account(history())
    parts = [summarize(acc, {60: {"flops": f}}, spec(accelerator="H100")) for f in (1e15, 3e15)]
    parts.append(summarize(acc, {}, spec(accelerator="H100")))  # reported nothing
    c = combine(parts)
    assert c["model_flops"] == pytest.approx(60 * 4e15)
    assert c["effective_mfu"] == pytest.approx(c["mfu"] * c["useful_share"])
    assert c["mfu"] == pytest.approx((parts[0]["mfu"] + parts[1]["mfu"]) / 2)
    assert c["peak"]["name"] == "H100 SXM" and "1 of 3 element(s) without MFU" in c["reason"]


def test_a_small_mfu_keeps_two_significant_digits_in_the_text():
    """The quickstart's CPU job runs at a fraction of a percent of its peak: "0.0%" would hide it."""
    from launcher.report.text import _frac, compute_lines

    assert [_frac(x) for x in (None, 0, 0.00047, 0.0095, 0.00999, 0.0123, 1.0)] == [
        "-", "0.0%", "0.047%", "0.95%", "1.0%", "1.2%", "100.0%"]
    lines = compute_lines({"mfu": 0.00058, "effective_mfu": 0.00047, "useful_share": 0.81, "peak_text": "P"})
    assert lines[0] == "MFU 0.058% of P" and lines[1].startswith("effective MFU 0.047% = MFU x useful compute 81.0%")


def test_the_plot_title_names_the_peak_its_mfu_is_against():
    from launcher.report.plot import title

    acc = account(history())
    d = acc.to_dict()
    d.update(job_id="j", compute=summarize(acc, {s: {"flops": 1e15} for s in range(10, 61, 10)}, spec(accelerator="H100")))
    first, second = title(d).split("\n")
    assert first.startswith("j: goodput ") and "; MFU " in first and ", effective MFU " in first
    assert second == "against the dense BF16 peak, H100 SXM, 989 TFLOPS per GPU"
    d["compute"] = summarize(acc, {}, spec(accelerator="H100"))  # no FLOPs reported: no MFU, no peak line
    assert "MFU" not in title(d) and "\n" not in title(d)


# ---------------------------------------------------------------- launcher peaks

def test_launcher_peaks_prints_the_table_and_one_lookup(tmp_path, monkeypatch):
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path))
    r = CliRunner().invoke(main, ["peaks", "--json"])
    assert r.exit_code == 0, r.output
    assert len(json.loads(r.output)) == len(peaks.rows())
    r = CliRunner().invoke(main, ["peaks", "NVIDIA GB300", "--json"])
    d = json.loads(r.output)
    assert d["row"]["name"] == "GB300" and d["peak"]["precision"] == "bf16" and d["peak"]["tflops"] == 2500
    r = CliRunner().invoke(main, ["peaks", "h100-pcie", "--precision", "FP8"])
    assert r.exit_code == 0 and "dense FP8 peak, H100 PCIe, 1513 TFLOPS per GPU" in r.output
    r = CliRunner().invoke(main, ["peaks"])
    assert "GB300" in r.output and "B300" in r.output and "source" in r.output
    r = CliRunner().invoke(main, ["peaks", "B300X"])
    assert r.exit_code != 0 and "peak unknown: B300X" in r.output


def test_a_root_the_report_could_not_read_is_not_asked_for_its_metrics_again():
    from launcher.report.collect import root_unread

    notes = ["could not read the checkpoint root s3://b/run: program starts, resumes and save timings unknown: x"]
    assert root_unread(notes, "s3://b/run")
    assert not root_unread(notes, "s3://b/run2") and not root_unread(notes, None) and not root_unread([], "s3://b/run")
