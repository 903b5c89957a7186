"""Shared fixtures. Each service lives in its own module under tests/fixtures/."""

import os

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
]
