"""SkyPilot v8 catalog CSVs read directly: the real column layouts, gaps and broken files."""

import os
from pathlib import Path

import pytest

from launcher_backends.skypilot.catalog import CatalogError, catalog_path, default_catalog_dir, load_catalog, read_vms_csv

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "catalog"

AWS_HEADER = ("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,"
              "Region,AvailabilityZone,Arch")
GCP_HEADER = "InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,SpotPrice"
LAMBDA_HEADER = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,SpotPrice"
RUNPOD_HEADER = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Region,SpotPrice,Price,AvailabilityZone,GpuInfo"


def write(tmp_path, cloud, text):
    p = tmp_path / cloud / "vms.csv"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def find(rows, **kw):
    hits = [r for r in rows if all(getattr(r, k) == v for k, v in kw.items())]
    assert len(hits) == 1, (kw, hits)
    return hits[0]


def test_example_catalog_files_have_the_real_v8_headers():
    for cloud, header in [("aws", AWS_HEADER), ("gcp", GCP_HEADER), ("lambda", LAMBDA_HEADER),
                          ("runpod", RUNPOD_HEADER)]:
        assert (EXAMPLES / cloud / "vms.csv").read_text().splitlines()[0] == header


def test_aws_layout(tmp_path):
    p = write(tmp_path, "aws", AWS_HEADER + "\n"
              "p5.48xlarge,H100,8,192.0,2048.0,\"{'Gpus': [{'Name': 'H100', 'Count': 8.0}]}\",98.32,41.29,us-east-1,use1-az1,x86_64\n"
              "m6i.large,,,2.0,8.0,,0.096,0.04,us-east-1,use1-az2,x86_64\n")
    rows = read_vms_csv(p, "aws")
    p5 = find(rows, instance_type="p5.48xlarge")
    assert (p5.accelerator, p5.accelerator_count, p5.vcpus, p5.memory_gib) == ("H100", 8, 192.0, 2048.0)
    assert (p5.price, p5.spot_price, p5.region, p5.zone) == (98.32, 41.29, "us-east-1", "use1-az1")
    cpu = find(rows, instance_type="m6i.large")
    assert cpu.accelerator is None and cpu.accelerator_count == 0
    assert p5.source == f"{p}:2"


def test_lambda_layout_has_no_zone_and_no_spot(tmp_path):
    p = write(tmp_path, "lambda", LAMBDA_HEADER + "\n"
              "gpu_8x_h100_sxm5,H100,8.0,208.0,1800.0,23.92,us-east-1,\"{'Gpus': []}\",\n")
    (r,) = read_vms_csv(p, "lambda")
    assert (r.instance_type, r.accelerator_count, r.price, r.spot_price, r.zone) == \
        ("gpu_8x_h100_sxm5", 8, 23.92, None, None)


def test_runpod_layout_with_its_own_column_order(tmp_path):
    p = write(tmp_path, "runpod", RUNPOD_HEADER + "\n"
              "8x_H100_SECURE,H100,8.0,128.0,1000.0,US,15.92,21.52,US-TX-3,\"{'Gpus': []}\"\n")
    (r,) = read_vms_csv(p, "runpod")
    assert (r.region, r.zone, r.price, r.spot_price, r.vcpus) == ("US", "US-TX-3", 21.52, 15.92, 128.0)


def test_gcp_gpus_are_priced_with_their_host_vm():
    rows = read_vms_csv(EXAMPLES / "gcp" / "vms.csv", "gcp")
    h100 = find(rows, accelerator="H100", zone="us-central1-a")
    assert h100.instance_type == "a3-highgpu-8g" and h100.accelerator_count == 8
    assert h100.price == pytest.approx(9.46006 + 78.79) and h100.spot_price == pytest.approx(2.88933 + 22.2)
    assert (h100.vcpus, h100.memory_gib) == (208.0, 1872.0)
    a100 = find(rows, accelerator="A100", zone="europe-west4-a")
    assert a100.instance_type == "a2-highgpu-1g" and a100.price == pytest.approx(0.81406 + 3.22)


def test_gcp_t4_gets_the_cheapest_n1_host_with_enough_cpus_and_memory():
    # T4 x1 wants 4 vCPUs and 16 GiB: n1-standard-4 has only 15 GiB, so n1-standard-8 it is
    t4 = find(read_vms_csv(EXAMPLES / "gcp" / "vms.csv", "gcp"), accelerator="T4")
    assert t4.instance_type == "n1-standard-8" and t4.price == pytest.approx(0.379998 + 0.35)
    # V100 x1 wants 8 vCPUs and 32 GiB: n1-standard-8 has 30 GiB, so the pricier n1-highmem-8
    v100 = find(read_vms_csv(EXAMPLES / "gcp" / "vms.csv", "gcp"), accelerator="V100")
    assert v100.instance_type == "n1-highmem-8" and v100.price == pytest.approx(0.473212 + 2.48)


def test_gcp_missing_spot_price_means_no_spot_offer_and_tpus_are_skipped():
    rows = read_vms_csv(EXAMPLES / "gcp" / "vms.csv", "gcp")
    v100 = find(rows, accelerator="V100")
    assert v100.price is not None and v100.spot_price is None
    assert find(rows, instance_type="n2-standard-8", region="us-east4").spot_price is None
    assert not [r for r in rows if (r.accelerator or "").startswith("tpu")]
    # host VMs that carry GPUs are not offered as CPU-only machines; plain VMs are
    assert not [r for r in rows if r.instance_type.startswith(("a2-", "a3-")) and not r.accelerator]
    assert find(rows, instance_type="n1-highmem-8", accelerator=None).price == pytest.approx(0.473212)


def test_missing_spot_price_column(tmp_path):
    p = write(tmp_path, "aws", "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region\n"
              "g6.xlarge,L4,1,4,16,0.8048,us-east-1\n")
    (r,) = read_vms_csv(p, "aws")
    assert r.price == 0.8048 and r.spot_price is None and r.zone is None


def test_empty_spot_price_in_aws(tmp_path):
    p = write(tmp_path, "aws", AWS_HEADER + "\ng6.xlarge,L4,1,4.0,16.0,,0.8048,,us-east-1,use1-az4,x86_64\n")
    assert read_vms_csv(p, "aws")[0].spot_price is None


@pytest.mark.parametrize("body,where,what", [
    ("g6.xlarge,L4,1,4.0,16.0,,0.80,0.3,us-east-1,use1-az1\n", "line 2", "expected 11 fields"),
    ("g6.xlarge,L4,1,4.0,16.0,,0.80,0.3,us-east-1,use1-az1,x86_64\n"
     "g6.2xlarge,L4,1,8.0,32.0,,cheap,0.3,us-east-1,use1-az1,x86_64\n", "line 3", "column Price"),
    ("g6.xlarge,L4,one,4.0,16.0,,0.80,0.3,us-east-1,use1-az1,x86_64\n", "line 2", "column AcceleratorCount"),
    ("g6.xlarge,L4,1,4.0,16.0,,-0.80,0.3,us-east-1,use1-az1,x86_64\n", "line 2", "non-negative"),
    ("g6.xlarge,L4,1,4.0,16.0,,0.80,0.3,,use1-az1,x86_64\n", "line 2", "Region is empty"),
])
def test_malformed_rows_name_file_line_and_column(tmp_path, body, where, what):
    p = write(tmp_path, "aws", AWS_HEADER + "\n" + body)
    with pytest.raises(CatalogError) as e:
        read_vms_csv(p, "aws")
    assert str(p) in str(e.value) and where in str(e.value) and what in str(e.value)


def test_a_multiline_quoted_field_reports_the_line_where_the_row_ends(tmp_path):
    p = write(tmp_path, "aws", AWS_HEADER + "\n"
              "g6.xlarge,L4,1,4.0,16.0,\"{'Gpus':\n []}\",0.80,0.3,us-east-1,use1-az1,x86_64\n"
              "g6.2xlarge,L4,1,8.0,32.0,,0.80,0.3,us-east-1\n")
    with pytest.raises(CatalogError, match=r"line 4: expected 11 fields"):
        read_vms_csv(p, "aws")


def test_missing_columns_and_empty_files_are_reported_on_line_1(tmp_path):
    p = write(tmp_path, "aws", "InstanceType,Price,Region\nx,1,r\n")
    with pytest.raises(CatalogError, match=r"line 1: missing column\(s\) AcceleratorName, AcceleratorCount"):
        read_vms_csv(p, "aws")
    p.write_text("")
    with pytest.raises(CatalogError, match=r"line 1: empty catalog"):
        read_vms_csv(p, "aws")


def test_non_utf8_file_is_named(tmp_path):
    p = tmp_path / "aws" / "vms.csv"
    p.parent.mkdir()
    p.write_bytes(AWS_HEADER.encode() + b"\n\xff\xfe,,,\n")
    with pytest.raises(CatalogError, match="not UTF-8"):
        read_vms_csv(p, "aws")


def test_load_catalog_rereads_a_changed_file(tmp_path):
    p = write(tmp_path, "aws", AWS_HEADER + "\ng6.xlarge,L4,1,4.0,16.0,,0.80,0.3,us-east-1,use1-az1,x86_64\n")
    assert load_catalog("aws", tmp_path)[0].price == 0.80
    p.write_text(AWS_HEADER + "\ng6.xlarge,L4,1,4.0,16.0,,0.9,0.3,us-east-1,use1-az1,x86_64\n")
    os.utime(p, ns=(p.stat().st_atime_ns, p.stat().st_mtime_ns + 10**9))
    assert load_catalog("aws", tmp_path)[0].price == 0.9


def test_missing_catalog_says_where_it_looked(tmp_path):
    with pytest.raises(CatalogError, match=str(tmp_path / "gcp" / "vms.csv")):
        load_catalog("gcp", tmp_path)


def test_default_catalog_dir_is_skypilots(monkeypatch, tmp_path):
    monkeypatch.delenv("SKY_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_catalog_dir() == tmp_path / ".sky" / "catalogs" / "v8"
    assert catalog_path("AWS") == tmp_path / ".sky" / "catalogs" / "v8" / "aws" / "vms.csv"
