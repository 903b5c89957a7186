"""``launcher peaks [NAME]``: the dense peak table MFU is measured against, or one lookup."""

from __future__ import annotations

import json

import click

from launcher.commands.common import launcher_of

_HELP = """The dense peak throughput (TFLOPS per accelerator; INT8: TOPS) of every accelerator
`launcher report` knows, by precision, with its source; or, with NAME, the row NAME
names and the peak MFU would use at --precision (default bf16, as resources.precision).

NAME may be a SkyPilot accelerator (H100, A100-80GB, tpu-v5p-8), a Slurm GRES type
(gpu:h100:8, nvidia_h100_80gb_hbm3) or an nvidia-smi product name ("NVIDIA H100 PCIe"),
in any case. A name no row matches is an error ("peak unknown: NAME"): there is no
fallback to a similar part. Every figure is dense (no structured sparsity).
"""


@click.command("peaks", help=_HELP, short_help="The accelerator peak table MFU is measured against.")
@click.argument("name", required=False)
@click.option("--precision", default="bf16", show_default=True,
              type=click.Choice(["fp32", "tf32", "bf16", "fp16", "fp8", "int8"], case_sensitive=False),
              help="With NAME: the precision of the peak to show.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def peaks(ctx, name, precision, as_json):
    d = launcher_of(ctx).peaks(name, precision.lower())  # PeakUnknown: "peak unknown: NAME"
    if as_json:
        click.echo(json.dumps(d["rows"] if name is None else d, indent=2))
    elif name is None:
        click.echo(_table(d["rows"], d["precisions"]), nl=False)
    else:
        click.echo(_lookup(d), nl=False)


def _fmt(x) -> str:
    return "-" if x is None else (f"{x:.0f}" if x >= 100 else f"{x:.3g}")


def _lookup(d: dict) -> str:
    row = d["row"]
    figures = ", ".join(f"{k.upper()} {_fmt(v)}" for k, v in row["tflops"].items() if v is not None)
    out = [f"{d['query']}: {row['name']} ({row['vendor']}, per {row['per']}, "
           f"{'dense' if row['dense'] else 'sparse'}): {figures}",
           f"  peak: {d['peak_text']}" if d["peak"] else f"  {d['reason']}",
           f"  source: {row['source']} ({row['date']})"]
    if row["note"]:
        out.append(f"  note: {row['note']}")
    return "\n".join(out) + "\n"


def _table(rows: list, precisions: list) -> str:
    head = ["accelerator", "vendor", "per", *(p.upper() for p in precisions), "date", "source"]
    body = [[r["name"], r["vendor"], r["per"], *(_fmt(r["tflops"][p]) for p in precisions), r["date"], r["source"]]
            for r in rows]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head) - 1)]
    lines = ["  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(x, widths))) + "  " + x[-1]
             for x in [head, *body]]
    return "\n".join(lines) + ("\n\ndense TFLOPS per accelerator (INT8: TOPS), no structured sparsity; '-': no "
                               "such figure. `launcher peaks NAME` looks a name up.\n")


def register(group) -> None:
    group.add_command(peaks)
