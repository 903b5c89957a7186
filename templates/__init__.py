"""Jinja templates (sbatch), shipped in the wheel; sites may override them (see README)."""
