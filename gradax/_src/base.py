"""Compatibility shim for `optax._src.base`: the protocol and its types.

The optax private module real code imports most: optax's own AdEMAMix
notebook does `from optax._src import base`, custom optimizers return
`base.GradientTransformation(init_fn, update_fn)` and annotate with
`base.Params`, `base.Updates` and `base.OptState`.

Maps the transformation classes (`GradientTransformation`,
`GradientTransformationExtraArgs`, so `isinstance(tx,
base.GradientTransformation)` holds for every gradax transformation), the
state types (`EmptyState`, `ScheduleState`), the type aliases, the
function types, `StatefulSchedule`, `identity`, `set_to_zero`,
`stateless`, `stateless_with_tree_map`, `init_empty_state` and
`with_extra_args_support`. Each is gradax's own object, defined nowhere
here: `base.GradientTransformation is gradax.GradientTransformation`.

`Schedule` and `ScheduleState` are gradax's classes, where optax's are
type aliases; annotations read the same. Left out: `NO_PARAMS_MSG` (an
error message; gradax's errors word their own).
See docs/optax-private-paths.md for the measured use of each name.
"""

from collections.abc import Sequence
from typing import Any

import jax

from gradax import EmptyState as EmptyState
from gradax import GradientTransformation as GradientTransformation
from gradax import (
    GradientTransformationExtraArgs as GradientTransformationExtraArgs,
)
from gradax import OptState as OptState
from gradax import Params as Params
from gradax import ScalarOrSchedule as ScalarOrSchedule
from gradax import Schedule as Schedule
from gradax import ScheduleState as ScheduleState
from gradax import StatefulSchedule as StatefulSchedule
from gradax import TransformInitFn as TransformInitFn
from gradax import TransformUpdateExtraArgsFn as TransformUpdateExtraArgsFn
from gradax import TransformUpdateFn as TransformUpdateFn
from gradax import Updates as Updates
from gradax import identity as identity
from gradax import init_empty_state as init_empty_state
from gradax import set_to_zero as set_to_zero
from gradax import stateless as stateless
from gradax import stateless_with_tree_map as stateless_with_tree_map
from gradax import with_extra_args_support as with_extra_args_support

# optax's annotation-only aliases, which gradax's public API has no names for.
# Annotations in real code (``Neuron: TypeAlias = base.PyTree``) fail at import
# without them; gradax's own Params/Updates/OptState are ``Any`` in the same way.
PyTree = Any
ArrayTree = Any
Shape = Sequence[int]
PRNGKey = jax.Array
