"""Offers gathered from the config's targets, price files and catalogs; spot chasing."""

from pathlib import Path

import pytest
import yaml

from launcher.backend.config import load_config
from launcher.core.errors import SpecError
from launcher.plan import Observation, apply_observations, gather_offers, plan
from launcher.plan.chase import evidence, posterior_rate
from launcher.plan.prices import load_price_book, load_price_file
from launcher_backends.skypilot.offers import parse_infra
from launcher.backend.sections import parse_spec

ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "examples" / "catalog"
PRICES = ROOT / "examples" / "prices"


def make_config(tmp_path, targets, **top):
    data = {"catalog_dir": str(CATALOG), "targets": targets, **top}
    p = tmp_path / "config.yaml"
    p.write_text(yaml.safe_dump(data))
    return load_config(p)


def spec(targets, **res):
    resources = {"nodes": 1, "gpus_per_node": 8, "accelerator": "H100", "time_limit": "10h", **res}
    return parse_spec({"name": "t", "run": "true", "resources": resources, "targets": targets})


def test_infra_strings():
    assert parse_infra("aws") == ("aws", None, None)
    assert parse_infra("AWS/us-east-1") == ("aws", "us-east-1", None)
    assert parse_infra("gcp/*/us-central1-a") == ("gcp", None, "us-central1-a")
    assert parse_infra(None) == (None, None, None)


def test_skypilot_target_filters_region_and_spot(tmp_path):
    cfg = make_config(tmp_path, {
        "aws-spot": {"backend": "skypilot", "infra": "aws/us-east-1", "use_spot": True},
        "aws-od": {"backend": "skypilot", "infra": "aws", "region": "us-west-2"}})
    got = gather_offers(spec(["aws-spot", "aws-od"]), cfg)
    spot = [o for o in got.offers if o.target == "aws-spot"]
    od = [o for o in got.offers if o.target == "aws-od"]
    # us-east-1 has three zones in the example catalog; use1-az4 has no spot price
    assert sorted(o.zone for o in spot) == ["use1-az1", "use1-az2"]
    assert all(o.spot and o.instance_type == "p5.48xlarge" and o.notice_seconds == 120 for o in spot)
    assert all(o.preemption_rate == 0.05 for o in spot)           # built-in AWS spot prior
    assert sorted(o.zone for o in od) == ["usw2-az1", "usw2-az2"]
    assert all(not o.spot and o.hourly_usd == 98.32 and o.preemption_rate == 2e-4 for o in od)


def test_configured_preemption_rates_win_over_defaults(tmp_path):
    cfg = make_config(tmp_path, {"gcp": {"backend": "skypilot", "infra": "gcp", "use_spot": True}},
                      preemption_rates={"spot": {"gcp": 0.7}, "on_demand": {"*": 0.001}})
    got = gather_offers(spec(["gcp"]), cfg)
    assert got.offers and all(o.preemption_rate == 0.7 and o.notice_seconds == 30 for o in got.offers)
    assert sorted(o.hourly_usd for o in got.offers) == pytest.approx([2.15966 + 18.0, 2.88933 + 22.2])


def test_lambda_has_no_spot_and_says_so(tmp_path):
    cfg = make_config(tmp_path, {"lam": {"backend": "skypilot", "infra": "lambda", "use_spot": True}})
    got = gather_offers(spec(["lam"]), cfg)
    assert got.offers == [] and "no spot offer for 8 x H100 in the lambda catalog" in got.notes[0]


def test_a_missing_catalog_is_a_note_not_a_crash(tmp_path):
    cfg = make_config(tmp_path, {"az": {"backend": "skypilot", "infra": "azure"}})
    got = gather_offers(spec(["az"]), cfg)
    assert got.offers == [] and "azure" in got.notes[0] and "vms.csv" in got.notes[0]


def test_a_malformed_catalog_is_reported_with_file_and_line(tmp_path):
    bad = tmp_path / "cat" / "aws" / "vms.csv"
    bad.parent.mkdir(parents=True)
    bad.write_text("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region\n"
                   "p5.48xlarge,H100,8,192,2048,lots,us-east-1\n")
    cfg = make_config(tmp_path, {"aws": {"backend": "skypilot", "infra": "aws"}}, catalog_dir=str(tmp_path / "cat"))
    got = gather_offers(spec(["aws"]), cfg)
    assert f"{bad}, line 2: column Price" in got.notes[0]


def test_price_files_add_neoclouds_and_override_catalog_rows(tmp_path):
    cfg = make_config(tmp_path, {"neb": {"backend": "skypilot", "infra": "nebius"},
                                 "aws": {"backend": "skypilot", "infra": "aws/us-east-1", "use_spot": True}},
                      price_files=[str(PRICES / "neoclouds.yaml")])
    got = gather_offers(spec(["neb", "aws"]), cfg)
    (neb,) = [o for o in got.offers if o.target == "neb" and o.accelerator_count == 8]
    assert (neb.instance_type, neb.hourly_usd, neb.region) == ("gpu-h100-sxm-8gpu-128vcpu-1600gb", 23.60, "eu-north1")
    az1 = [o for o in got.offers if o.target == "aws" and o.zone == "use1-az1"]
    assert [o.hourly_usd for o in az1] == [30.10]                 # negotiated, not the catalog's 41.29
    assert "neoclouds.yaml" in az1[0].source


def test_price_file_rate_and_notice_are_used(tmp_path):
    cfg = make_config(tmp_path, {"neb": {"backend": "skypilot", "infra": "nebius", "use_spot": True}},
                      price_files=[str(PRICES / "neoclouds.yaml")])
    (o,) = gather_offers(spec(["neb"], gpus_per_node=1), cfg).offers
    assert (o.hourly_usd, o.preemption_rate, o.notice_seconds) == (1.25, 0.15, 30.0)


def test_slurm_prices_most_specific_first(tmp_path):
    cfg = make_config(tmp_path, {"cluster-a": {"backend": "slurm", "gpu_hour_usd": 2.0},
                                 "cluster-b": {"backend": "slurm"}},
                      price_files=[str(PRICES / "slurm.yaml")])
    got = gather_offers(spec(["cluster-a"]), cfg)
    by_part = {o.instance_type: o for o in got.offers}
    assert set(by_part) == {"gpu", "preempt"}
    assert by_part["gpu"].hourly_usd == pytest.approx(1.25 * 8)   # the partition's price wins over config
    assert by_part["gpu"].queue_wait_hours == 3.0 and by_part["gpu"].memory_gib == 1000
    assert by_part["preempt"].preemption_rate == 0.3 and by_part["preempt"].hourly_usd == pytest.approx(3.2)
    assert by_part["gpu"].notice_seconds == 120  # the spec's recovery.grace: it checkpoints on a signal
    # cluster-b's a100 partition has 4 A100-80GB per node: a spec for 4 fits, priced GPU + node hours
    s = spec(["cluster-b"], gpus_per_node=4, accelerator="A100-80GB")
    (b,) = gather_offers(s, cfg).offers
    assert (b.accelerator, b.accelerator_count, b.hourly_usd) == ("A100-80GB", 4, pytest.approx(4 * 0.8 + 0.5))


def test_slurm_target_without_price_file_uses_config_gpu_hour_and_pinned_partition(tmp_path):
    cfg = make_config(tmp_path, {"cl": {"backend": "slurm", "gpu_hour_usd": 1.5, "partition": "batch"}})
    got = gather_offers(spec(["cl"]), cfg)
    (o,) = got.offers
    assert (o.instance_type, o.hourly_usd, o.accelerator, o.accelerator_count) == ("batch", 12.0, None, 8)
    assert any("not declared" in n for n in got.notes) and any("queue wait" in n for n in got.notes)
    # a measured queue wait (a backend's queue_wait) replaces the unknown
    got = gather_offers(spec(["cl"]), cfg, queue_waits={("cl", "batch"): 2.5})
    assert got.offers[0].queue_wait_hours == 2.5


def test_unpriced_slurm_target_is_free_with_a_note(tmp_path):
    cfg = make_config(tmp_path, {"cl": {"backend": "slurm"}})
    got = gather_offers(spec(["cl"]), cfg)
    assert got.offers[0].hourly_usd == 0 and any("no price" in n for n in got.notes)


def test_all_configured_targets_when_the_spec_names_none(tmp_path):
    cfg = make_config(tmp_path, {"a": {"backend": "slurm", "gpu_hour_usd": 1.0},
                                 "b": {"backend": "skypilot", "infra": "lambda"}})
    got = gather_offers(spec([]), cfg)
    assert {o.target for o in got.offers} == {"a", "b"}


def test_unknown_target_in_the_spec_is_an_error_with_a_suggestion(tmp_path):
    cfg = make_config(tmp_path, {"aws-spot": {"backend": "skypilot", "infra": "aws"}})
    with pytest.raises(Exception, match="did you mean 'aws-spot'"):
        gather_offers(spec(["aws-spto"]), cfg)


def test_price_file_errors_name_file_field_and_line(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text("neoclouds:\n  - cloud: x\n    region: r\n    instance_type: i\n    price: -3\n"
                 "slurm:\n  cl:\n    gpu_hour: 1\n")
    with pytest.raises(SpecError) as e:
        load_price_file(p)
    text = str(e.value)
    assert str(p) in text and "neoclouds[0].price" in text and "line 5" in text
    assert "slurm.cl.gpu_hour" in text and "did you mean 'gpu_hour_usd'" in text


def test_price_files_are_read_relative_to_the_config(tmp_path):
    (tmp_path / "prices").mkdir()
    (tmp_path / "prices" / "s.yaml").write_text("slurm: {cl: {gpu_hour_usd: 0.5}}\n")
    book = load_price_book(["prices/s.yaml"], tmp_path)
    assert book.section("slurm")["cl"].gpu_hour_usd == 0.5


# --- spot chasing ---------------------------------------------------------------------

def test_posterior_rate_moves_from_the_prior_towards_what_was_seen():
    # Gamma prior of shape 1 with the configured mean: worth 1/rate node-hours of evidence
    assert posterior_rate(0.05, 0.0, 0) == pytest.approx(0.05)
    assert posterior_rate(0.05, 20.0, 0) == pytest.approx(1 / 40)
    assert posterior_rate(0.05, 6.0, 6) == pytest.approx(7 / 26)
    assert posterior_rate(0.05, 6.0, 6, prior_events=4.0) == pytest.approx(10 / 86)
    assert posterior_rate(0.0, 10.0, 2) == pytest.approx(0.2)


def test_old_evidence_fades_with_its_half_life():
    k = ("aws", "us-east-1", "use1-az1", "p5.48xlarge", True)
    ev = evidence([Observation(k, 10.0, 4, age_hours=48.0), Observation(k, 2.0, 1)], half_life_hours=24.0)
    assert ev[k] == (pytest.approx(2.5 + 2.0), pytest.approx(1.0 + 1.0))


def test_a_zone_that_keeps_preempting_loses_the_top_rank(tmp_path):
    cfg = make_config(tmp_path, {"aws": {"backend": "skypilot", "infra": "aws/us-east-1", "use_spot": True}})
    s = spec(["aws"])
    before = plan(s, cfg)
    top = before.best.offer
    assert top.zone == "use1-az1"                                   # the cheapest spot zone
    seen = [Observation(top.key, node_hours=3.0, events=6)]
    after = plan(s, cfg, observations=seen)
    assert after.best.offer.zone == "use1-az2"
    moved = apply_observations([top], seen)
    assert moved[0].preemption_rate == pytest.approx(6.25 / 8)      # a fresh burst: the short memory's rate
    long_only = apply_observations([top], seen, recent_half_life_hours=0)
    assert long_only[0].preemption_rate == pytest.approx(7 / 23)
    # one stray preemption after a long calm run does not move the job
    calm = plan(s, cfg, observations=[Observation(top.key, node_hours=20.0, events=1)])
    assert calm.best.offer.zone == "use1-az1"


def test_skypilot_fallbacks_add_placements_and_gpu_hour_usd_prices_them(tmp_path):
    cfg = make_config(tmp_path, {"sky": {
        "backend": "skypilot", "infra": "lambda/us-east-1",
        "fallbacks": [{"infra": "runpod", "use_spot": True}, {"infra": "lambda"}]}})
    got = gather_offers(spec(["sky"]), cfg)
    where = sorted((o.cloud, o.region, o.spot) for o in got.offers if o.accelerator_count == 8)
    # lambda us-east-1 once (own placement and the fallback overlap), lambda us-west-1, runpod spot x2
    assert where == [("lambda", "us-east-1", False), ("lambda", "us-west-1", False),
                     ("runpod", "CA", True), ("runpod", "US", True)]
    cfg = make_config(tmp_path, {"sky": {"backend": "skypilot", "infra": "lambda", "gpu_hour_usd": 2.0},
                                 "k8s": {"backend": "skypilot", "infra": "kubernetes/lab", "gpu_hour_usd": 1.5},
                                 "k8s-unpriced": {"backend": "skypilot", "infra": "kubernetes/lab"}})
    got = gather_offers(spec(["sky", "k8s", "k8s-unpriced"]), cfg)
    eight = [o for o in got.offers if o.target == "sky" and o.accelerator_count == 8]
    assert eight and all(o.hourly_usd == 16.0 and o.source == "config gpu_hour_usd" for o in eight)
    (k8s,) = [o for o in got.offers if o.target == "k8s"]
    assert (k8s.hourly_usd, k8s.accelerator, k8s.accelerator_count) == (12.0, "H100", 8)
    assert any("k8s-unpriced" in n and "gpu_hour_usd" in n for n in got.notes)


def test_ranked_rows_become_skypilot_placements(tmp_path):
    cfg = make_config(tmp_path, {"aws": {"backend": "skypilot", "infra": "aws/us-east-1", "use_spot": True},
                                 "gcp": {"backend": "skypilot", "infra": "gcp", "use_spot": True}})
    res = plan(spec(["aws", "gcp"], nodes=2), cfg)
    by_cloud = {r.offer.cloud: r.placement() for r in reversed(res.ranked)}
    # AWS zone IDs are account-specific: the placement names the region only
    assert by_cloud["aws"]["infra"] == "aws/us-east-1" and by_cloud["aws"]["use_spot"] is True
    assert by_cloud["gcp"]["infra"].startswith("gcp/") and by_cloud["gcp"]["infra"].count("/") == 2
    best = res.ranked[0]
    assert best.placement()["hourly_usd"] == pytest.approx(2 * best.offer.hourly_usd)
    assert best.placement()["instance_type"] == best.offer.instance_type


# --- price files: each section is its backend's --------------------------------------

def _rack_backend():
    from typing import ClassVar

    from launcher.backend.pricefiles import PriceModel

    class RackRate(PriceModel):
        usd: float

    class RackBackend:  # launcher.backend.protocols.Pricing
        name: ClassVar[str] = "rack"
        price_section: ClassVar[str] = "racks"
        price_options: ClassVar = dict[str, RackRate]

        @classmethod
        def merge_prices(cls, merged, section, source):
            return {**(merged or {}), **{k: (v.usd, source) for k, v in section.items()}}

        @classmethod
        def offers(cls, spec, context):
            return []

        @classmethod
        def offer_key(cls, target, handle_extra, status_extra):
            return None

    return RackBackend


def test_a_price_file_section_belongs_to_the_backend_that_declares_it(tmp_path, monkeypatch):
    import sys
    import types
    from importlib.metadata import EntryPoint

    from launcher.backend.registry import Registry
    from launcher.plan.prices import price_sections

    mod = types.ModuleType("rack_plugin_for_test")
    mod.RackBackend = _rack_backend()
    monkeypatch.setitem(sys.modules, "rack_plugin_for_test", mod)
    reg = Registry([EntryPoint("slurm", "launcher_backends.slurm:SlurmBackend", "launcher.backends"),
                    EntryPoint("rack", "rack_plugin_for_test:RackBackend", "launcher.backends")])
    assert sorted(price_sections(reg)) == ["racks", "slurm"]
    (tmp_path / "a.yaml").write_text("racks: {r1: {usd: 1.5}}\nslurm: {cl: {gpu_hour_usd: 0.5}}\n")
    (tmp_path / "b.yaml").write_text("racks: {r2: {usd: 2}}\n")
    book = load_price_book(["a.yaml", "b.yaml"], tmp_path, registry=reg)
    assert book.section("racks") == {"r1": (1.5, str(tmp_path / "a.yaml")), "r2": (2.0, str(tmp_path / "b.yaml"))}
    assert book.section("slurm")["cl"].gpu_hour_usd == 0.5 and book.section("neoclouds") is None
    (tmp_path / "c.yaml").write_text("neoclouds: []\n")  # skypilot's section: not installed in REG
    with pytest.raises(SpecError, match="neoclouds"):
        load_price_book(["c.yaml"], tmp_path, registry=reg)


def test_a_slurm_partition_offers_the_gpus_asked_for_up_to_what_its_nodes_have():
    from launcher_backends.slurm.offers import _gpu_count

    assert _gpu_count(4, 8) == 4      # part of a node's GPUs
    assert _gpu_count(8, 4) == 4      # no more than a node has
    assert _gpu_count(4, None) == 4   # not declared: assumed to fit
    assert _gpu_count(0, 8) == 8      # no GPUs asked for: the node's count, as the price file declares it
