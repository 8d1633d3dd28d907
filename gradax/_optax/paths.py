"""optax's private module paths outside `optax._src`, served lazily.

Code written for optax imports from `optax.contrib._muon`,
`optax.transforms._masking`, `optax.losses._classification`, ... With
`optax` replaced by `gradax` those paths land in gradax's packages. Where
gradax has a real module at the path (`gradax.contrib._adopt`), that module
already carries optax's names. Every other path is listed in `PATHS` and
built on first import by a finder at the end of `sys.meta_path` (so a real
file always wins): a module object whose names are gradax's own objects
(`gradax.contrib._muon.muon is gradax.muon`) and nothing else. A name gradax
has no counterpart for is left out, so it fails as any missing name does.

`import gradax` installs the finder and builds nothing; the packages'
`__getattr__` (`package_getattr`) loads a module on its first attribute
access, so `gradax.contrib._muon.muon` works after a bare `import gradax`,
as `optax.contrib._muon.muon` does after `import optax`.
docs/optax-private-paths.md lists the paths, the names, what is left out and
how often public code uses each path. New code should use the public names.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Callable, Sequence

# gradax path -> (the public gradax module its names come from, the names).
# A name written ``module:name`` comes from that module instead (a name the
# public module does not offer). Each entry has every name of optax 0.2.8's
# module except those docs/optax-private-paths.md lists as left out.
PATHS: dict[str, tuple[str, str]] = {
    # optax.contrib: the other 16 private modules are real gradax modules.
    "gradax.contrib._complex_valued": (
        "gradax.contrib",
        "SplitRealAndImaginaryState split_real_and_imaginary"
        " gradax.contrib._complex:SplitRealAndImaginaryArrays",
    ),
    "gradax.contrib._muon": (
        "gradax.contrib",
        "MuonDimensionNumbers MuonState muon orthogonalize_via_newton_schulz"
        " scale_by_muon gradax:scale_by_shape",
    ),
    # optax.transforms
    "gradax.transforms._accumulation": (
        "gradax.transforms",
        "EmaState MultiSteps MultiStepsState ShouldSkipUpdateFunction TraceState"
        " ema skip_large_updates skip_not_finite trace",
    ),
    "gradax.transforms._adding": (
        "gradax.transforms",
        "AddNoiseState add_decayed_weights add_noise gradax:WeightDecaySchedule",
    ),
    "gradax.transforms._clipping": (
        "gradax.transforms",
        "adaptive_grad_clip clip clip_by_block_rms clip_by_global_norm"
        " per_example_global_norm_clip per_example_layer_norm_clip unitwise_clip"
        " unitwise_norm",
    ),
    "gradax.transforms._combining": (
        "gradax.transforms",
        "PartitionState chain named_chain partition",
    ),
    "gradax.transforms._conditionality": (
        "gradax.transforms",
        "ApplyIfFiniteState ConditionFn ConditionallyMaskState"
        " ConditionallyTransformState apply_if_finite conditionally_mask"
        " conditionally_transform",
    ),
    "gradax.transforms._constraining": (
        "gradax.transforms",
        "NonNegativeParamsState ZeroNansState keep_params_nonnegative zero_nans",
    ),
    "gradax.transforms._freezing": (
        "gradax.transforms",
        "freeze masked partition selective_transform",
    ),
    "gradax.transforms._layouts": ("gradax.transforms", "flatten"),
    "gradax.transforms._masking": (
        "gradax.transforms",
        "MaskedNode MaskedState masked",
    ),
    "gradax.transforms._monitoring": (
        "gradax.transforms",
        "MonitorState SnapshotState measure_with_ema monitor snapshot",
    ),
    # optax.schedules: _join and _inject are real gradax modules.
    "gradax.schedules._schedule": (
        "gradax.schedules",
        "constant_schedule cosine_decay_schedule cosine_onecycle_schedule"
        " exponential_decay linear_onecycle_schedule linear_schedule"
        " piecewise_constant_schedule piecewise_interpolate_schedule"
        " polynomial_schedule sgdr_schedule warmup_constant_schedule"
        " warmup_cosine_decay_schedule warmup_exponential_decay_schedule",
    ),
    # optax.tree_utils (a module in gradax; install() lets it hold submodules).
    "gradax.tree_utils._casting": (
        "gradax.tree_utils",
        "tree_cast tree_cast_like tree_dtype",
    ),
    "gradax.tree_utils._random": (
        "gradax.tree_utils",
        "tree_random_like tree_split_key_like tree_unwrap_random_key_data",
    ),
    "gradax.tree_utils._state_utils": (
        "gradax.tree_utils",
        "NamedTupleKey tree_get tree_get_all_with_path tree_map_params tree_set",
    ),
    "gradax.tree_utils._tree_math": (
        "gradax.tree_utils",
        "tree_add tree_add_scale tree_allclose tree_batch_shape"
        " tree_bias_correction tree_clip tree_conj tree_div tree_full_like"
        " tree_max tree_min tree_mul tree_norm tree_ones_like tree_real"
        " tree_scale tree_size tree_sub tree_sum tree_update_infinity_moment"
        " tree_update_moment tree_update_moment_per_elem_norm tree_vdot"
        " tree_where tree_zeros_like",
    ),
    # optax.losses: the other 6 private modules are real gradax modules.
    "gradax.losses._classification": (
        "gradax.losses",
        "convex_kl_divergence ctc_loss ctc_loss_with_forward_probs"
        " generalized_kl_divergence hinge_loss kl_divergence"
        " kl_divergence_with_log_targets multiclass_hinge_loss"
        " multiclass_perceptron_loss multiclass_sparsemax_loss perceptron_loss"
        " poly_loss_cross_entropy safe_softmax_cross_entropy"
        " sigmoid_binary_cross_entropy sigmoid_focal_loss softmax_cross_entropy"
        " softmax_cross_entropy_with_integer_labels sparsemax_loss",
    ),
}


def names(path: str) -> tuple[str, ...]:
    """The names the module at `path` offers (optax's names gradax has)."""
    return tuple(item.rpartition(":")[2] for item in PATHS[path][1].split())


def _fill(module: types.ModuleType) -> None:
    source, items = PATHS[module.__name__]
    for item in items.split():
        owner, _, name = item.rpartition(":")
        value = getattr(importlib.import_module(owner or source), name)
        setattr(module, name, value)
    optax_path = "optax" + module.__name__.removeprefix("gradax")
    module.__doc__ = (
        f"Compatibility shim for ``{optax_path}``: optax's names bound to "
        f"gradax's objects (see docs/optax-private-paths.md)."
    )
    vars(module)["__all__"] = list(names(module.__name__))


class _ShimLoader(importlib.abc.Loader):
    """Builds a shim module: gradax's objects under optax's names."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # the default module object

    def exec_module(self, module: types.ModuleType) -> None:
        _fill(module)


class OptaxPathFinder(importlib.abc.MetaPathFinder):
    """Finds the modules of `PATHS`; placed last, so real files win."""

    _loader = _ShimLoader()

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in PATHS:
            return None
        return importlib.machinery.ModuleSpec(fullname, self._loader)


def package_getattr(
    package: str, fallback: Callable[[str], object] | None = None
) -> Callable[[str], object]:
    """A module `__getattr__` for `package` that loads its optax paths.

    `fallback` is the package's own `__getattr__`, tried first.
    """

    def __getattr__(name: str) -> object:
        if fallback is not None:
            try:
                return fallback(name)
            except AttributeError:
                pass
        if f"{package}.{name}" in PATHS:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


# Packages given their attribute fallback here rather than in their own
# ``__init__``: gradax.losses imports only JAX, NumPy and the standard library
# (tests/losses), and gradax.tree_utils is a module.
_EQUIPPED_HERE = ("gradax.tree_utils", "gradax.losses")


def install() -> None:
    """Append the finder to `sys.meta_path` (once) and equip two packages.

    `gradax.tree_utils` is a module where optax's is a package: an empty
    `__path__` lets the import system look for its submodules (only the
    finder has any). It and `gradax.losses` get a `__getattr__` that
    serves the attribute path (`gradax.losses._classification`).
    """
    if not any(isinstance(f, OptaxPathFinder) for f in sys.meta_path):
        sys.meta_path.append(OptaxPathFinder())
    for name in _EQUIPPED_HERE:
        module = sys.modules.get(name)
        if module is None or getattr(module, "_optax_paths_equipped", False):
            continue
        if not hasattr(module, "__path__"):
            module.__path__ = []
        own = vars(module).get("__getattr__")
        vars(module)["__getattr__"] = package_getattr(name, own)
        vars(module)["_optax_paths_equipped"] = True
