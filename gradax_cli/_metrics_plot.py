"""``gradax demo``'s second figure: what the optimizer did at each step.

Every run of the demo is wrapped in ``gradax.with_metrics``; its metrics of
each step are in results.json under ``"metrics"``. The figure shows, for
the AdamW and the Muon run side by side (or the first two runs), the update
RMS of each parameter group, the gradient norm (of the whole tree, before
the clip, with the clip's threshold and the steps where it fired) and the
learning rate of each group.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# Runs shown side by side when they are there (else the first two).
PREFERRED = ("adamw", "muon")


def columns(results: dict[str, Any]) -> list[str]:
    """The labels of the runs the figure shows."""
    runs = results["optimizers"]
    chosen = []
    for name in PREFERRED:
        label = next((k for k, r in runs.items() if r["optimizer"] == name), None)
        if label is not None:
            chosen.append(label)
    return chosen or list(runs)[:2]


def groups(metrics: dict[str, list[float]]) -> list[str]:
    """The parameter groups a run's metrics name ("" for the whole tree)."""
    named = sorted(
        name.removesuffix("/update_rms")
        for name in metrics
        if name.endswith("/update_rms") and not name.startswith("leaf/")
    )
    return named or [""]


def _key(group: str, name: str) -> str:
    return f"{group}/{name}" if group else name


def clip_steps(metrics: dict[str, list[float]], name: str = "clip/fired") -> list[int]:
    """The steps (from 1) at which a metric flag was set."""
    return [i + 1 for i, fired in enumerate(metrics.get(name, [])) if fired > 0.5]


def clip_lines(results: dict[str, Any], clip: float) -> list[str]:
    """One line a run: how often the gradient clip fired, and skipped steps."""
    lines = []
    for label, run in results["optimizers"].items():
        metrics = run.get("metrics", {})
        if "clip/fired" not in metrics:
            continue
        fired, steps = clip_steps(metrics), len(metrics["clip/fired"])
        largest = max(metrics["grad_norm"], default=float("nan"))
        if fired:
            where = f"first at step {fired[0]}, last at step {fired[-1]}"
            text = (
                f"{label}: the gradient clip (global norm {clip:g}) fired at "
                f"{len(fired)} of {steps} steps ({where}; largest norm {largest:.3g})"
            )
        else:
            text = (
                f"{label}: the gradient clip (global norm {clip:g}) never fired "
                f"(largest norm {largest:.3g})"
            )
        skipped = clip_steps(metrics, "skipped")
        if skipped:
            text += f"; {len(skipped)} steps skipped, the first at step {skipped[0]}"
        lines.append(text)
    return lines


def plot(results: dict[str, Any], path: Path, clip: float) -> bool:
    """Write the figure; False if matplotlib is missing or no run has metrics."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    shown = [k for k in columns(results) if results["optimizers"][k].get("metrics")]
    if not shown:
        return False
    fig, axes = plt.subplots(
        3, len(shown), figsize=(5.5 * len(shown), 8), sharex="col", squeeze=False
    )
    for column, label in enumerate(shown):
        run = results["optimizers"][label]
        metrics = run["metrics"]
        steps = range(1, len(metrics["grad_norm"]) + 1)
        rms, norm, rate = axes[:, column]
        for group in groups(metrics):
            name = group or "all parameters"
            rms.plot(steps, metrics[_key(group, "update_rms")], label=name)
            if group:
                norm.plot(steps, metrics[_key(group, "grad_norm")], label=name)
            for key in (_key(group, "lr"), *_numbered(metrics, _key(group, "lr"))):
                if key in metrics:
                    rate.plot(steps, metrics[key], label=key.removesuffix("/lr"))
        norm.plot(steps, metrics["grad_norm"], color="black", label="whole tree")
        norm.axhline(clip, color="gray", linestyle="--", linewidth=0.8)
        fired = clip_steps(metrics)
        if fired:
            values = [metrics["grad_norm"][s - 1] for s in fired]
            norm.plot(
                fired, values, "rv", markersize=4, label=f"clip fired ({len(fired)})"
            )
        skipped = clip_steps(metrics, "skipped")
        if skipped:
            for s in skipped:
                norm.axvline(s, color="red", linewidth=0.6)
        rms.set_title(f"{label}: {run['recipe']}", fontsize=9)
        rms.set_yscale("log")
        norm.set_yscale("log")
        rms.set_ylabel("update RMS")
        norm.set_ylabel("gradient norm (before the clip)")
        rate.set_ylabel("learning rate")
        rate.set_xlabel("step")
        for ax in (rms, norm, rate):
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, frameon=False)
    cfg = results["config"]
    fig.suptitle(
        f"gradax demo: the optimizer's metrics (gradax.with_metrics), "
        f"{cfg['params']:,}-parameter character transformer",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return True


def _numbered(metrics: dict[str, Any], name: str) -> list[str]:
    """`name_2`, `name_3`, ...: a second learning rate in the same group."""
    return sorted(k for k in metrics if k.startswith(f"{name}_"))
