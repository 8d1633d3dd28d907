"""The gallery: each script of examples/ as a page with its output and plot.

Running every example at each site build would cost CI a minute or more, so
the pages are written by this script and committed:

    python docs/hooks/gallery.py            # all examples
    python docs/hooks/gallery.py lbfgs.py   # one

For each example it runs ``main()`` with its default arguments, keeps what it
printed and what it returned (a loss curve, or several by name), and writes
``docs/gallery/<name>.md`` (the script's docstring, the output, the plot and,
at build time, the script itself through a snippet) and
``docs/gallery/<name>.png``. ``tests/docs/test_examples.py`` reruns every
example (``--json``: outputs and curves as JSON, in a process with XLA's
default options, as a user runs them) and fails when a page's output is no
longer what the script prints.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import io
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
GALLERY = ROOT / "docs" / "gallery"


@dataclass(frozen=True)
class Example:
    file: str
    title: str
    ylabel: str = "loss"
    log: bool = True  # a log scale for the y axis
    hline: float | None = None  # a reference line (a cap, a bound)

    @property
    def stem(self) -> str:
        return Path(self.file).stem


# In the gallery's order.
GALLERY_EXAMPLES = [
    Example("quickstart.py", "Quickstart: from optax in one import"),
    Example("plain_jax.py", "Plain JAX with Muon"),
    Example("flax_nnx.py", "flax nnx: nnx.Optimizer"),
    Example("equinox_train.py", "equinox"),
    Example("muon_routing.py", "Muon with routing"),
    Example(
        "muonclip.py",
        "MuonClip",
        ylabel="largest attention logit",
        log=False,
        hline=60.0,
    ),
    Example("bf16_training.py", "16-bit training"),
    Example("lbfgs.py", "L-BFGS", ylabel="objective"),
    Example("checkpoints.py", "Checkpoints and carry_state"),
    Example("nnx_checkpoint.py", "flax nnx: checkpoint and restore"),
    Example("change_learning_rate.py", "Change the learning rate on resuming"),
    Example("muon_schedule_mask.py", "Muon with a schedule and a weight-decay mask"),
    Example("width_transfer.py", "Width transfer", ylabel="RMS change of the output"),
    Example("metrics.py", "Training metrics", ylabel="metric"),
]


def load(file: str) -> Any:
    """The example's module, imported from its file."""
    spec = importlib.util.spec_from_file_location(
        f"example_{Path(file).stem}", EXAMPLES / file
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(example: Example, **kwargs: Any) -> tuple[str, Any]:
    """What ``main(**kwargs)`` prints, and what it returns."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = load(example.file).main(**kwargs)
    return out.getvalue(), result


def docstring(example: Example) -> tuple[str, str]:
    """The first line of the script's docstring, and the rest without "Run:"."""
    text = ast.get_docstring(ast.parse((EXAMPLES / example.file).read_text())) or ""
    first, _, rest = text.partition("\n")
    body = [line for line in rest.strip().splitlines() if not line.startswith("Run:")]
    return first.strip(), "\n".join(body).strip()


def page(example: Example, output: str) -> str:
    """The Markdown page of an example, given what it printed."""
    summary, body = docstring(example)
    return f"""# {example.title}

{summary}

{body}

Run it with `python examples/{example.file}` (CPU, a few seconds).

## Output

```text
{output.rstrip()}
```

![{example.title}: {example.ylabel} against the step]({example.stem}.png)

## The script

```python title="examples/{example.file}"
--8<-- "examples/{example.file}"
```
"""


def index() -> str:
    """The gallery's front page: a card for each example."""
    cards = []
    for example in GALLERY_EXAMPLES:
        summary, _ = docstring(example)
        cards.append(
            f"-   [**{example.title}**]({example.stem}.md)\n\n"
            f"    ![]({example.stem}.png)\n\n"
            f"    {summary}\n"
        )
    return (
        "# Gallery\n\n"
        "Complete training scripts from `examples/`, each small enough to run "
        "on a CPU in seconds, with what it prints and a plot of its run. The "
        "pages are made by `python docs/hooks/gallery.py`; a test reruns "
        "every script and fails when a page no longer shows what it prints.\n\n"
        '<div class="grid cards" markdown>\n\n' + "\n".join(cards) + "\n</div>\n"
    )


def curves(result: Any) -> dict[str, list[float]]:
    """A returned loss curve, or several by name, as named lists."""
    if isinstance(result, dict):
        return {name: [float(v) for v in values] for name, values in result.items()}
    return {"": [float(v) for v in result]}


def plot(example: Example, result: Any, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=100)
    # Line styles as well as colours: curves that coincide stay visible.
    styles = ["-", "--", "-.", ":"]
    for k, (name, values) in enumerate(curves(result).items()):
        shown = [v if v > 0 or not example.log else math.nan for v in values]
        style = styles[k % len(styles)]
        ax.plot(range(len(values)), shown, style, label=name or None, linewidth=1.5)
    if example.hline is not None:
        ax.axhline(example.hline, color="gray", linestyle="--", linewidth=1)
    if example.log:
        ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel(example.ylabel)
    ax.set_title(example.title)
    if isinstance(result, dict):
        ax.legend(frameon=False)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    # No timestamp in the file: a rerun with the same numbers is the same PNG.
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)


def report(files: list[str]) -> str:
    """JSON of each example's output and curves (what the test compares)."""
    import json

    found = {}
    for example in GALLERY_EXAMPLES:
        if not files or example.file in files:
            output, result = run(example)
            found[example.file] = {"output": output, "curves": curves(result)}
    return json.dumps(found)


def main(files: list[str]) -> None:
    GALLERY.mkdir(exist_ok=True)
    for example in GALLERY_EXAMPLES:
        if files and example.file not in files:
            continue
        print(f"running {example.file}", file=sys.stderr)
        output, result = run(example)
        (GALLERY / f"{example.stem}.md").write_text(page(example, output))
        plot(example, result, GALLERY / f"{example.stem}.png")
    (GALLERY / "index.md").write_text(index())


if __name__ == "__main__":
    if sys.argv[1:2] == ["--json"]:
        print(report(sys.argv[2:]))
    else:
        main(sys.argv[1:])
