"""Building blocks: small transformations that optimizers are made of."""

# ``optax.transforms`` names, so ``optax.transforms.masked`` code keeps working
# after ``import gradax as optax``. They are resolved lazily from the top-level
# package: importing the combinators here would be circular (they import
# building blocks from this package).
_FROM_GRADAX = frozenset(
    (
        "AddNoiseState",
        "ApplyIfFiniteState",
        "ConditionFn",
        "ConditionallyMaskState",
        "ConditionallyTransformState",
        "EmaState",
        "MaskedNode",
        "MaskedState",
        "MonitorState",
        "MultiSteps",
        "MultiStepsState",
        "NonNegativeParamsState",
        "PartitionState",
        "ShouldSkipUpdateFunction",
        "SnapshotState",
        "TraceState",
        "ZeroNansState",
        "adaptive_grad_clip",
        "add_decayed_weights",
        "add_noise",
        "apply_if_finite",
        "chain",
        "clip",
        "clip_by_block_rms",
        "clip_by_global_norm",
        "conditionally_mask",
        "conditionally_transform",
        "ema",
        "flatten",
        "freeze",
        "keep_params_nonnegative",
        "masked",
        "measure_with_ema",
        "monitor",
        "named_chain",
        "partition",
        "per_example_global_norm_clip",
        "per_example_layer_norm_clip",
        "selective_transform",
        "skip_large_updates",
        "skip_not_finite",
        "snapshot",
        "trace",
        "unitwise_clip",
        "unitwise_norm",
        "zero_nans",
    )
)


def __getattr__(name: str):
    if name in _FROM_GRADAX:
        import gradax

        return getattr(gradax, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_FROM_GRADAX})
