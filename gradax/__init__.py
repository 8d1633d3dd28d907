"""gradax: gradient processing and optimization for JAX."""

from . import tree as tree
from ._core import Alias as Alias
from ._core import EmptyState as EmptyState
from ._core import GradientTransformation as GradientTransformation
from ._core import GradientTransformationExtraArgs as GradientTransformationExtraArgs
from ._core import OptState as OptState
from ._core import Params as Params
from ._core import ScheduleState as ScheduleState
from ._core import Updates as Updates
from ._core import apply_updates as apply_updates
from ._core import identity as identity
from ._core import incremental_update as incremental_update
from ._core import periodic_update as periodic_update
from ._core import set_to_zero as set_to_zero
from ._core import stateless as stateless
from ._core import stateless_with_tree_map as stateless_with_tree_map
from ._core import with_extra_args_support as with_extra_args_support
from ._hyper import FunctionSchedule as FunctionSchedule
from ._hyper import Schedule as Schedule
from ._hyper import StatefulSchedule as StatefulSchedule
from ._pytree import Module as Module
from ._pytree import static_field as static_field
from .combinators.chain import chain as chain
from .combinators.chain import named_chain as named_chain
from .combinators.inject import InjectHyperparamsState as InjectHyperparamsState
from .combinators.inject import (
    InjectStatefulHyperparamsState as InjectStatefulHyperparamsState,
)
from .combinators.inject import inject_hyperparams as inject_hyperparams
from .combinators.inject import (
    inject_stateful_hyperparams as inject_stateful_hyperparams,
)
from .combinators.masked import MaskedNode as MaskedNode
from .combinators.masked import MaskedState as MaskedState
from .combinators.masked import PartitionState as PartitionState
from .combinators.masked import masked as masked
from .combinators.masked import multi_transform as multi_transform
from .combinators.masked import partition as partition
from .optimizers.adam import ScaleByAdamState as ScaleByAdamState
from .optimizers.adam import adam as adam
from .optimizers.adam import adamw as adamw
from .optimizers.adam import scale_by_adam as scale_by_adam
from .transforms.scaling import scale as scale
from .transforms.scaling import scale_by_learning_rate as scale_by_learning_rate
from .transforms.scaling import scale_by_schedule as scale_by_schedule
from .transforms.weight_decay import add_decayed_weights as add_decayed_weights

__version__ = "0.1.0.dev0"
