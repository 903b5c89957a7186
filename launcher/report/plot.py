"""The report's timeline as a PNG: one row per attempt, its segments coloured by
category, committed checkpoints as ticks, preemption notices and failures marked.

matplotlib is imported here only (the ``plot`` extra), with the Agg backend: no
display is needed. The figure has a fixed size (``WIDTH`` x ``HEIGHT`` pixels).
"""

from __future__ import annotations

from launcher.core.errors import LauncherError
from launcher.report.accounting import CATEGORIES, LABELS
from launcher.report.clocks import LABELS as CLOCK_LABELS
from launcher.report.text import _frac
from launcher.state.rows import resume_words

WIDTH, HEIGHT, DPI = 1200, 500, 100
COLORS = {"queue_wait": "#bdbdbd", "provisioning": "#9ecae1", "useful_compute": "#31a354",
          "checkpoint_overhead": "#3182bd", "capture_stall": "#9ecae1", "lost_work": "#de2d26",
          "in_job_restart": "#fdae6b", "restart_overhead": "#fd8d3c"}
# an interruption's clocks (launcher.report.clocks), drawn as a strip under its restart overhead
CLOCK_COLORS = {"detection": "#7f2704", "cleanup": "#a63603", "reallocation": "#fdd0a2", "restore": "#6a51a3",
                "unsplit": "#525252"}


def title(report: dict) -> str:
    """The figure's title: the job, its goodput and wall time, and its MFU when known, naming
    the peak it is against on a second line (as the text report does)."""
    gp = report.get("goodput_pct")
    if gp is None:
        return str(report["job_id"])
    out = f"{report['job_id']}: goodput {gp:.1f}% of {report['wall_s']:.0f} s wall time"
    c = report.get("compute") or {}
    if c.get("mfu") is not None:
        out += f"; MFU {_frac(c['mfu'])}, effective MFU {_frac(c['effective_mfu'])}"
        if c.get("peak_text"):
            out += f"\nagainst the {c['peak_text']}"
    return out


def row_label(a: dict) -> str:
    """An attempt's row label: its number, its host when known, and where it resumed (the step and
    the checkpoint tier: ``launcher.state.rows.resume_words``, as ``status``, ``report`` and ``serve`` say)."""
    where = resume_words(a.get("resume_step"), a.get("resume_tier"))
    return "\n".join(x for x in (f"attempt {a['attempt']}", a.get("host"), where if where != "-" else None) if x)


def clock_seconds(report: dict) -> dict:
    """{clock: seconds drawn} over the report's tagged segments, in CLOCK_COLORS' order."""
    out = {c: 0.0 for c in CLOCK_COLORS}
    for s in report.get("segments") or []:
        if s.get("clock") in out:
            out[s["clock"]] += s["end"] - s["start"]
    return {c: v for c, v in out.items() if v > 0}


def plot(report: dict, path: str) -> str:
    try:
        import matplotlib  # matplotlib: heavy and optional (the [plot] extra)

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt  # matplotlib: heavy and optional (the [plot] extra)
        from matplotlib.patches import Patch  # matplotlib: heavy and optional (the [plot] extra)
    except ImportError as e:
        raise LauncherError(f"--plot needs matplotlib: pip install 'launcher[plot]' ({e})") from None

    t0 = report["t0"]
    attempts = report["attempts"]
    n = max(1, len(attempts))
    fig, ax = plt.subplots(figsize=(WIDTH / DPI, HEIGHT / DPI), dpi=DPI)
    try:
        rows = {a["attempt"]: i for i, a in enumerate(attempts)}
        for s in report["segments"]:
            y = rows.get(s["attempt"], 0)
            ax.broken_barh([(s["start"] - t0, s["end"] - s["start"])], (y - 0.35, 0.7),
                           facecolors=COLORS[s["category"]], edgecolors="none")
            if s.get("clock") in CLOCK_COLORS:
                ax.broken_barh([(s["start"] - t0, s["end"] - s["start"])], (y + 0.22, 0.13),
                               facecolors=CLOCK_COLORS[s["clock"]], edgecolors="none")
        commit_label = fail_label = notice_label = True
        for a in attempts:
            y = rows[a["attempt"]]
            for sv in a["saves"]:
                if sv["committed"]:
                    ax.plot([sv["end"] - t0] * 2, [y - 0.45, y + 0.45], color="black", lw=1.2,
                            label="checkpoint committed" if commit_label else None)
                    commit_label = False
            if a.get("preempt_notice"):
                ax.plot(a["preempt_notice"] - t0, y + 0.45, marker="v", color="purple", ms=9, ls="none",
                        label="preemption notice" if notice_label else None)
                notice_label = False
            if a["failed"]:
                at = (a.get("failure_at") or a["ended"]) - t0
                ax.plot(at, y, marker="X", color="darkred", ms=12, ls="none",
                        label="interrupted" if fail_label else None)
                ax.annotate(a["state"], (at, y), xytext=(4, 10), textcoords="offset points", fontsize=8,
                            color="darkred")
                fail_label = False
        ax.set_yticks(range(n))
        ax.set_yticklabels([row_label(a) for a in attempts] or ["-"], fontsize=8)
        ax.set_ylim(n - 0.5, -0.5)
        ax.set_xlim(0, max(1e-9, report["wall_s"]) * 1.02)
        ax.set_xlabel("seconds since the first submission")
        ax.set_title(title(report))
        handles = [Patch(facecolor=COLORS[c], label=f"{LABELS[c]} {report['categories'][c]:.0f} s")
                   for c in CATEGORIES]
        handles += [Patch(facecolor=CLOCK_COLORS[c], label=f"{CLOCK_LABELS[c]} {v:.1f} s")
                    for c, v in clock_seconds(report).items()]
        h2, l2 = ax.get_legend_handles_labels()
        ax.legend(handles=handles + h2, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=6, fontsize=8,
                  frameon=False)
        ax.grid(axis="x", alpha=0.3)
        fig.subplots_adjust(left=0.16, right=0.98, top=0.9, bottom=0.3)
        fig.savefig(path, dpi=DPI, format="png")
    finally:
        plt.close(fig)
    return path
