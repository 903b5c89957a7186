"""Shared fixtures. Each service lives in its own module under tests/fixtures/."""

import os
from pathlib import Path

import pytest

# Tests never talk to a real cloud or to SkyPilot's usage endpoint.
os.environ.setdefault("SKYPILOT_DISABLE_USAGE_COLLECTION", "1")
os.environ.setdefault("SKYPILOT_DISABLE_LOCAL_API_SERVER", "1")
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")

pytest_plugins = [
    "tests.fixtures.home",
    "tests.fixtures.slurm",
    "tests.fixtures.docker_slurm",
    "tests.fixtures.moto",
    "tests.fixtures.mlflow_server",
    "tests.fixtures.sshd",
    "tests.fixtures.skypilot_slurm",
    "tests.fixtures.postgres",
    "tests.fixtures.stores",
    "tests.fixtures.cpu_time",
]


INTEGRATION = Path(__file__).resolve().parent / "integration"


def pytest_collection_modifyitems(config, items):
    """Every test under tests/integration carries the marker ``integration``: a tier selects
    by directory and marker at once (scripts/test-tiers.sh: the services tier is the
    integration tests that need no Slurm, plus the PostgreSQL variants of the unit tests)."""
    for item in items:
        if INTEGRATION in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.integration)
