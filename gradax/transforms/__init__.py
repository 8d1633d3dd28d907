"""Building blocks: small transformations that optimizers are made of."""

from .._lazy import reexport_lazily

# ``optax.transforms`` names, so ``optax.transforms.masked`` code keeps working
# after ``import gradax as optax``. They are resolved lazily from the top-level
# package: importing the combinators here would be circular (they import
# building blocks from this package).
__getattr__, __dir__ = reexport_lazily(
    __name__,
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
    ),
)
