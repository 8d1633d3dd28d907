"""Building blocks: small transformations that optimizers are made of."""

from typing import TYPE_CHECKING

from .._lazy import reexport_lazily
from .._optax_paths import package_getattr

if TYPE_CHECKING:
    # The same names, for static tools (pyrefly, IDEs), which do not run the
    # module __getattr__ below; tests/core/test_package_structure.py keeps the two
    # lists equal.
    from gradax import (
        AddNoiseState as AddNoiseState,
    )
    from gradax import (
        ApplyIfFiniteState as ApplyIfFiniteState,
    )
    from gradax import (
        ConditionallyMaskState as ConditionallyMaskState,
    )
    from gradax import (
        ConditionallyTransformState as ConditionallyTransformState,
    )
    from gradax import (
        ConditionFn as ConditionFn,
    )
    from gradax import (
        EmaState as EmaState,
    )
    from gradax import (
        MaskedNode as MaskedNode,
    )
    from gradax import (
        MaskedState as MaskedState,
    )
    from gradax import (
        MonitorState as MonitorState,
    )
    from gradax import (
        MultiSteps as MultiSteps,
    )
    from gradax import (
        MultiStepsState as MultiStepsState,
    )
    from gradax import (
        NonNegativeParamsState as NonNegativeParamsState,
    )
    from gradax import (
        PartitionState as PartitionState,
    )
    from gradax import (
        ShouldSkipUpdateFunction as ShouldSkipUpdateFunction,
    )
    from gradax import (
        SnapshotState as SnapshotState,
    )
    from gradax import (
        TraceState as TraceState,
    )
    from gradax import (
        ZeroNansState as ZeroNansState,
    )
    from gradax import (
        adaptive_grad_clip as adaptive_grad_clip,
    )
    from gradax import (
        add_decayed_weights as add_decayed_weights,
    )
    from gradax import (
        add_noise as add_noise,
    )
    from gradax import (
        apply_if_finite as apply_if_finite,
    )
    from gradax import (
        chain as chain,
    )
    from gradax import (
        clip as clip,
    )
    from gradax import (
        clip_by_block_rms as clip_by_block_rms,
    )
    from gradax import (
        clip_by_global_norm as clip_by_global_norm,
    )
    from gradax import (
        conditionally_mask as conditionally_mask,
    )
    from gradax import (
        conditionally_transform as conditionally_transform,
    )
    from gradax import (
        ema as ema,
    )
    from gradax import (
        flatten as flatten,
    )
    from gradax import (
        freeze as freeze,
    )
    from gradax import (
        keep_params_nonnegative as keep_params_nonnegative,
    )
    from gradax import (
        masked as masked,
    )
    from gradax import (
        measure_with_ema as measure_with_ema,
    )
    from gradax import (
        monitor as monitor,
    )
    from gradax import (
        named_chain as named_chain,
    )
    from gradax import (
        partition as partition,
    )
    from gradax import (
        per_example_global_norm_clip as per_example_global_norm_clip,
    )
    from gradax import (
        per_example_layer_norm_clip as per_example_layer_norm_clip,
    )
    from gradax import (
        selective_transform as selective_transform,
    )
    from gradax import (
        skip_large_updates as skip_large_updates,
    )
    from gradax import (
        skip_not_finite as skip_not_finite,
    )
    from gradax import (
        snapshot as snapshot,
    )
    from gradax import (
        trace as trace,
    )
    from gradax import (
        unitwise_clip as unitwise_clip,
    )
    from gradax import (
        unitwise_norm as unitwise_norm,
    )
    from gradax import (
        zero_nans as zero_nans,
    )

# ``optax.transforms`` names, so ``optax.transforms.masked`` code keeps working
# after ``import gradax as optax``. They are resolved lazily from the top-level
# package: importing the combinators here would be circular (they import
# building blocks from this package).
_reexported, __dir__ = reexport_lazily(
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

# optax's private module paths (``optax.transforms._masking``) load on first access.
__getattr__ = package_getattr(__name__, _reexported)
