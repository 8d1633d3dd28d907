"""The ``gradax`` command: ``gradax demo`` and ``gradax bench``.

Run ``gradax demo --help`` or ``gradax bench --help`` for the options;
``python -m gradax`` is the same command. Bad input ends the command with one
line on stderr, naming the subcommand, and exit status 2 (the statuses are
listed in :data:`EXIT_STATUSES`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["EXIT_STATUSES", "main"]

# What each exit status means; printed at the end of every --help.
EXIT_STATUSES = (
    (0, "success"),
    (1, "a benchmark failed (gradax bench), or an unexpected error (traceback)"),
    (2, "bad input: one line on stderr, naming the command"),
    (130, "interrupted (Ctrl-C)"),
)

_EPILOG = "exit status:\n" + "\n".join(
    f"  {code:<4} {meaning}" for code, meaning in EXIT_STATUSES
)


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's wrapping, except for the exit-status table, kept line by line."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("exit status:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def _version() -> str:
    """``gradax X (jax Y, jaxlib Z, Python W)``, without importing jax."""
    from importlib.metadata import PackageNotFoundError, version

    from gradax import __version__

    parts = []
    for name in ("jax", "jaxlib"):
        try:
            parts.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            parts.append(f"{name} not installed")
    python = ".".join(str(v) for v in sys.version_info[:3])
    return f"gradax {__version__} ({', '.join(parts)}, Python {python})"


class UsageError(Exception):
    """Bad input, reported as one line on stderr."""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, not usage plus a line."""

    def error(self, message: str):
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def _nonnegative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


# The demo's model sizes (--transfer has its own; see gradax_cli.transfer).
DEMO_SIZES = {"context": 64, "d_model": 128, "layers": 2, "heads": 4}


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="gradax",
        description="gradax: gradient processing and optimization for JAX.",
        epilog=_EPILOG,
        formatter_class=_HelpFormatter,
    )
    parser.add_argument(
        "--version",
        action="version",
        version=_version(),
        help="print gradax's version (and jax's, jaxlib's, Python's) and exit",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    from ._demo import FULL, OPTIMIZERS, QUICK

    demo = commands.add_parser(
        "demo",
        epilog=_EPILOG,
        formatter_class=_HelpFormatter,
        help="train a small character-level transformer with several optimizers",
        description=(
            "Train a small character-level transformer with each optimizer from "
            "the same initialization on the same batches, then compare them. By "
            "default the text is the Python standard library's own source "
            "(split into training and validation by file); --data trains on "
            "any text file (first 90 percent training, last 10 percent validation)."
        ),
    )
    demo.add_argument(
        "--optimizers",
        default="adamw,muon",
        help=(
            "comma-separated names, each optionally with a peak learning rate "
            f"(name:lr), from: {', '.join(OPTIMIZERS)} "
            "(default: %(default)s)"
        ),
    )
    demo.add_argument(
        "--full",
        action="store_true",
        help=(
            f"the longer run: {FULL.steps} steps of {FULL.batch_size} sequences, "
            f"evaluated every {FULL.eval_every} steps (the default run, "
            f"{QUICK.steps} steps of {QUICK.batch_size} evaluated every "
            f"{QUICK.eval_every}, shows its result in about a minute on 2 cores)"
        ),
    )
    demo.add_argument(
        "--steps",
        type=_positive_int,
        default=None,
        help=(
            f"training steps per optimizer (default: {QUICK.steps}; "
            f"{FULL.steps} with --full)"
        ),
    )
    demo.add_argument(
        "--batch-size",
        type=_positive_int,
        default=None,
        help=(
            f"sequences per step (default: {QUICK.batch_size}; "
            f"{FULL.batch_size} with --full)"
        ),
    )
    demo.add_argument(
        "--seed",
        type=_nonnegative_int,
        default=0,
        help="initialization and batch order (default: %(default)s)",
    )
    demo.add_argument(
        "--out",
        type=Path,
        default=Path("gradax-demo"),
        help="directory for results.json, loss.png and metrics.png "
        "(default: %(default)s)",
    )
    demo.add_argument(
        "--data", type=Path, default=None, help="train on this text file instead"
    )
    tuning = demo.add_argument_group("learning-rate sweep")
    tuning.add_argument(
        "--tune",
        action="store_true",
        help=(
            "first train each optimizer at each rate of a small grid for fewer "
            "steps, then compare them at their best rates (writes tune.png)"
        ),
    )
    tuning.add_argument(
        "--tune-steps",
        type=_positive_int,
        default=None,
        help="steps per sweep run (default: a third of --steps)",
    )
    tuning.add_argument(
        "--grid",
        default=None,
        help=(
            "comma-separated multipliers of each optimizer's rate (default: per "
            "family, e.g. 0.3,1,3 for adamw and muon, 0.1,0.3,1 for lion and sgd)"
        ),
    )
    model = demo.add_argument_group("model size")
    for name, what in (
        ("context", "characters per sequence"),
        ("d_model", "width"),
        ("layers", "transformer blocks"),
        ("heads", "attention heads"),
    ):
        # None: the mode's default (--transfer has its own sizes).
        model.add_argument(
            "--" + name.replace("_", "-"),
            type=_positive_int,
            default=None,
            help=f"{what} (default: {DEMO_SIZES[name]})",
        )
    from .transfer import add_arguments as add_transfer_arguments

    add_transfer_arguments(demo, _positive_int)

    bench = commands.add_parser(
        "bench",
        epilog=_EPILOG,
        formatter_class=_HelpFormatter,
        help="time gradax against optax, torch, scipy and the machine's floors",
        description=(
            "Run each comparison shipped with gradax (each in its own process) "
            "and print one table row per comparison: gradax's time, a "
            "reference's (optax; torch and scipy where installed), their "
            "ratio, and the machine's floor."
        ),
    )
    bench.add_argument(
        "--quick",
        action="store_true",
        help="small problems, fewer repeats (a few minutes on 2 cores; noisy ratios)",
    )
    bench.add_argument(
        "--json", type=Path, default=None, help="write every figure here"
    )
    bench.add_argument(
        "--plot",
        type=Path,
        default=None,
        help="draw the ratios, the floor marked, into this .png/.svg/.pdf file",
    )
    from .benchmarks import BENCHMARKS

    bench.add_argument(
        "--only",
        default=None,
        help=f"comma-separated benchmark names, from: {', '.join(BENCHMARKS)}",
    )
    bench.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="run the bench_*.py files of this folder instead",
    )
    return parser


def _run(args: argparse.Namespace) -> int:
    if args.command == "demo" and args.transfer is not None:
        from . import transfer

        try:
            return transfer.main(args)
        except transfer.TransferError as error:
            raise UsageError(f"gradax demo --transfer: {error}") from None
    if args.command == "demo":
        from . import _demo as demo
        from . import _tune as tune

        for name in ("widths", "depths", "points", "rows"):
            if getattr(args, name) is not None:
                raise UsageError(f"gradax demo: --{name} needs --transfer")
        for name, default in DEMO_SIZES.items():
            if getattr(args, name) is None:
                setattr(args, name, default)
        try:
            if not args.tune and (args.grid is not None or args.tune_steps):
                flag = "--grid" if args.grid is not None else "--tune-steps"
                raise demo.DemoError(f"{flag} needs --tune")
            try:
                grid = None if args.grid is None else tune.parse_grid(args.grid)
            except tune.GridError as error:
                raise demo.DemoError(str(error)) from None
            preset = demo.FULL if args.full else demo.QUICK
            config = demo.DemoConfig(
                optimizers=demo.parse_optimizers(args.optimizers),
                steps=args.steps or preset.steps,
                batch_size=args.batch_size or preset.batch_size,
                eval_every=preset.eval_every,
                full=args.full,
                seed=args.seed,
                out=args.out,
                data=args.data,
                context=args.context,
                d_model=args.d_model,
                layers=args.layers,
                heads=args.heads,
                tune=args.tune,
                tune_steps=args.tune_steps,
                grid=grid,
            )
            if args.d_model % args.heads:
                raise demo.DemoError(
                    f"--d-model ({args.d_model}) must be a multiple of "
                    f"--heads ({args.heads})"
                )
            return demo.main(config)
        except demo.DemoError as error:
            raise UsageError(f"gradax demo: {error}") from None
    from . import _bench as bench

    try:
        return bench.main(args)
    except bench.BenchError as error:
        raise UsageError(f"gradax bench: {error}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gradax`` console script; returns the exit status."""
    try:
        args, unknown = build_parser().parse_known_args(argv)
        if unknown:
            # argparse names the top-level parser; the user typed a subcommand.
            prog = f"gradax {args.command}"
            raise UsageError(
                f"{prog}: unrecognized arguments: {' '.join(unknown)} "
                f"(see {prog} --help)"
            )
        return _run(args)
    except UsageError as error:
        print(error, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gradax: interrupted", file=sys.stderr)
        return 130
