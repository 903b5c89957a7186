"""A tiny synthetic SkyPilot v8 catalog for tests and benchmarks (real column layouts, made-up prices).

``write_catalog(root)`` writes ``root/.sky/catalogs/v8/...``; point SkyPilot at it with
``SKY_RUNTIME_DIR=root`` (or ``HOME=root``) *before* ``import sky``: SkyPilot fixes the
catalog directory at import. No ``.meta/*.md5`` files are written, so SkyPilot treats
every CSV as user-provided and never tries to download a fresh one (offline-safe).
"""

from __future__ import annotations

import os
from pathlib import Path


def _gpu_info(name: str, count: int, mib: int) -> str:
    info = {"Gpus": [{"Name": name, "Manufacturer": "NVIDIA", "Count": float(count), "MemoryInfo": {"SizeInMiB": mib}}],
            "TotalGpuMemoryInMiB": mib * count}
    return '"' + str(info) + '"'


def _aws() -> str:
    rows = ["InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,"
            "AvailabilityZone,Arch"]
    regions = [("us-east-1", ["use1-az1", "use1-az2"], 1.00, [0.40, 0.45]),
               ("us-west-2", ["usw2-az1", "usw2-az2"], 1.00, [0.35, 0.50]),
               ("eu-west-1", ["euw1-az1"], 1.10, [0.60])]
    types = [("p5.48xlarge", "H100", 8, 192, 2048, 81920, 98.32),
             ("p4de.24xlarge", "A100-80GB", 8, 96, 1152, 81920, 40.97),
             ("g6.xlarge", "L4", 1, 4, 16, 23034, 0.8048),
             ("m6i.large", "", "", 2, 8, None, 0.096),
             ("m6i.2xlarge", "", "", 8, 32, None, 0.384)]
    for region, zones, od_mult, spot in regions:
        for zone, spot_factor in zip(zones, spot, strict=True):
            for it, acc, cnt, cpu, mem, mib, price in types:
                p = round(price * od_mult, 4)
                gi = _gpu_info(acc, cnt, mib) if acc else ""
                rows.append(f"{it},{acc},{cnt},{float(cpu)},{float(mem)},{gi},{p},{round(p * spot_factor, 4)},"
                            f"{region},{zone},x86_64")
    return "\n".join(rows) + "\n"


def _lambda() -> str:
    rows = ["InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,SpotPrice"]
    for r in ["us-east-1", "us-west-1"]:
        rows.append(f"gpu_8x_h100_sxm5,H100,8.0,208.0,1800.0,23.92,{r},{_gpu_info('H100', 8, 81920)},")
        rows.append(f"gpu_1x_h100_pcie,H100,1.0,26.0,200.0,2.49,{r},{_gpu_info('H100', 1, 81920)},")
        rows.append(f"gpu_8x_a100_80gb_sxm4,A100-80GB,8.0,240.0,1800.0,14.32,{r},{_gpu_info('A100', 8, 81920)},")
    return "\n".join(rows) + "\n"


def _runpod() -> str:
    rows = ["InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Region,SpotPrice,Price,"
            "AvailabilityZone,GpuInfo"]
    for reg, az in [("US", "US-TX-3"), ("CA", "CA-MTL-1")]:
        rows.append(f"8x_H100_SECURE,H100,8.0,128.0,1000.0,{reg},15.92,21.52,{az},{_gpu_info('H100', 8, 81920)}")
        rows.append(f"1x_H100_SECURE,H100,1.0,16.0,125.0,{reg},1.99,2.69,{az},{_gpu_info('H100', 1, 81920)}")
        rows.append(f"1x_L4_SECURE,L4,1.0,12.0,50.0,{reg},0.22,0.43,{az},{_gpu_info('L4', 1, 23034)}")
    return "\n".join(rows) + "\n"


FILES = {
    "common/accelerators.csv": 'AcceleratorName,Clouds\nA100-80GB,"[\'AWS\', \'Lambda\', \'RunPod\']"\n'
                               'H100,"[\'AWS\', \'Lambda\', \'RunPod\']"\nL4,"[\'AWS\', \'RunPod\']"\n',
    "common/metadata.csv": "GPU,MemoryGB,Manufacturer\nA100-80GB,80,nvidia\nH100,80,nvidia\nL4,24,nvidia\n",
    "aws/vms.csv": _aws(),
    "aws/images.csv": "Tag,Region,OS,OSVersion,ImageId,CreationDate\n",
    "aws/instance_quota_mapping.csv": "InstanceType,QuotaCode\np5.48xlarge,L-417A185B\n",
    "lambda/vms.csv": _lambda(),
    "runpod/vms.csv": _runpod(),
}


def write_catalog(root) -> Path:
    """Write the catalog under ``root/.sky/catalogs/v8`` and return that directory."""
    base = Path(root) / ".sky" / "catalogs" / "v8"
    for rel, text in FILES.items():
        path = base / rel
        os.makedirs(path.parent, exist_ok=True)
        path.write_text(text)
    return base
