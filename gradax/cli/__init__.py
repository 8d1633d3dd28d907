"""The ``gradax`` command: ``gradax demo`` and ``gradax bench``.

Run ``gradax demo --help`` or ``gradax bench --help`` for the options. Bad
input ends the command with one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main"]


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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="gradax",
        description="gradax: gradient processing and optimization for JAX.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    from .demo import OPTIMIZERS

    demo = commands.add_parser(
        "demo",
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
        "--steps",
        type=_positive_int,
        default=300,
        help="training steps per optimizer (default: %(default)s)",
    )
    demo.add_argument(
        "--batch-size",
        type=_positive_int,
        default=32,
        help="sequences per step (default: %(default)s)",
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
        help="directory for results.json and loss.png (default: %(default)s)",
    )
    demo.add_argument(
        "--data", type=Path, default=None, help="train on this text file instead"
    )
    model = demo.add_argument_group("model size")
    for flag, default, what in (
        ("--context", 64, "characters per sequence"),
        ("--d-model", 128, "width"),
        ("--layers", 2, "transformer blocks"),
        ("--heads", 4, "attention heads"),
    ):
        model.add_argument(
            flag,
            type=_positive_int,
            default=default,
            help=f"{what} (default: %(default)s)",
        )

    bench = commands.add_parser(
        "bench",
        help="time gradax against optax and the machine's floors",
        description=(
            "Run each benchmarks/bench_*.py comparison (each in its own process) "
            "and print a table of the figures."
        ),
    )
    bench.add_argument(
        "--quick", action="store_true", help="fewer repeats (about a minute)"
    )
    bench.add_argument("--json", type=Path, default=None, help="write figures here")
    bench.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="the benchmarks folder (default: ./benchmarks or the checkout's)",
    )
    bench.add_argument(
        "--only", default=None, help="comma-separated benchmark names (e.g. adamw)"
    )
    return parser


def _run(args: argparse.Namespace) -> int:
    if args.command == "demo":
        from . import demo

        try:
            config = demo.DemoConfig(
                optimizers=demo.parse_optimizers(args.optimizers),
                steps=args.steps,
                batch_size=args.batch_size,
                seed=args.seed,
                out=args.out,
                data=args.data,
                context=args.context,
                d_model=args.d_model,
                layers=args.layers,
                heads=args.heads,
            )
            if args.d_model % args.heads:
                raise demo.DemoError(
                    f"--d-model ({args.d_model}) must be a multiple of "
                    f"--heads ({args.heads})"
                )
            return demo.main(config)
        except demo.DemoError as error:
            raise UsageError(f"gradax demo: {error}") from None
    from . import bench

    try:
        return bench.main(args)
    except bench.BenchError as error:
        raise UsageError(f"gradax bench: {error}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gradax`` console script; returns the exit status."""
    try:
        args = build_parser().parse_args(argv)
        return _run(args)
    except UsageError as error:
        print(error, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gradax: interrupted", file=sys.stderr)
        return 130
