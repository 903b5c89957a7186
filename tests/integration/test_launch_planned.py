"""`launcher launch` without --target takes the planner's first row among the spec's targets."""

from .launcher_cli import LauncherCLI


def test_launch_picks_the_cheapest_expected_target(tmp_path):
    # two "clusters" that are really this machine: the planner sees their internal prices
    cli = LauncherCLI(tmp_path, None)
    (tmp_path / "config.yaml").write_text(
        "targets:\n"
        "  pricey: {backend: slurm, partition: batch, gpu_hour_usd: 9.0}\n"
        "  cheap: {backend: slurm, partition: batch, gpu_hour_usd: 1.0}\n")
    spec = cli.spec("planned", {"run": "true", "targets": ["pricey", "cheap"],
                                "resources": {"gpus_per_node": 1, "time_limit": "1h"}})
    p = cli.run("launch", spec, check=False)
    assert "planner: cheap ranks first" in p.stderr, p.stderr
