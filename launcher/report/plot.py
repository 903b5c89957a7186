"""The report's timeline as a PNG: one row per attempt, its segments coloured by
category, committed checkpoints as ticks, preemption notices and failures marked.

matplotlib is imported here only (the ``plot`` extra), with the Agg backend: no
display is needed. The figure has a fixed size (``WIDTH`` x ``HEIGHT`` pixels).
"""

from __future__ import annotations

from launcher.core.errors import LauncherError
from launcher.report.accounting import CATEGORIES, LABELS

WIDTH, HEIGHT, DPI = 1200, 500, 100
COLORS = {"queue_wait": "#bdbdbd", "provisioning": "#9ecae1", "useful_compute": "#31a354",
          "checkpoint_overhead": "#3182bd", "capture_stall": "#9ecae1", "lost_work": "#de2d26",
          "in_job_restart": "#fdd0a2", "restart_overhead": "#fd8d3c"}


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
        ax.set_yticklabels([f"attempt {a['attempt']}" + (f"\n{a['host']}" if a.get("host") else "")
                            for a in attempts] or ["-"])
        ax.set_ylim(n - 0.5, -0.5)
        ax.set_xlim(0, max(1e-9, report["wall_s"]) * 1.02)
        ax.set_xlabel("seconds since the first submission")
        gp = report.get("goodput_pct")
        ax.set_title(f"{report['job_id']}: goodput {gp:.1f}% of {report['wall_s']:.0f} s wall time"
                     if gp is not None else report["job_id"])
        handles = [Patch(facecolor=COLORS[c], label=f"{LABELS[c]} {report['categories'][c]:.0f} s")
                   for c in CATEGORIES]
        h2, l2 = ax.get_legend_handles_labels()
        ax.legend(handles=handles + h2, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=5, fontsize=8,
                  frameon=False)
        ax.grid(axis="x", alpha=0.3)
        fig.subplots_adjust(left=0.1, right=0.98, top=0.9, bottom=0.3)
        fig.savefig(path, dpi=DPI, format="png")
    finally:
        plt.close(fig)
    return path
