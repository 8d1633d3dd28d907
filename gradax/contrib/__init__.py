"""The optimizers of `optax.contrib`, under the same names.

Every name here is also exported at the top level (`gradax.prodigy` is
`gradax.contrib.prodigy`).
"""

from .._optax.paths import package_getattr
from ..optimizers.adam import ScaleByAdamState as ScaleByAdamState
from ..orthogonal.dimensions import MuonDimensionNumbers as MuonDimensionNumbers
from ..orthogonal.muon import MuonState as MuonState
from ..orthogonal.muon import muon as muon
from ..orthogonal.muon import scale_by_muon as scale_by_muon
from ..orthogonal.via_newton_schulz import (
    orthogonalize_via_newton_schulz as orthogonalize_via_newton_schulz,
)
from ._acprop import acprop as acprop
from ._acprop import scale_by_acprop as scale_by_acprop
from ._ademamix import ScaleByAdemamixState as ScaleByAdemamixState
from ._ademamix import (
    ScaleBySimplifiedAdEMAMixState as ScaleBySimplifiedAdEMAMixState,
)
from ._ademamix import ademamix as ademamix
from ._ademamix import scale_by_ademamix as scale_by_ademamix
from ._ademamix import scale_by_simplified_ademamix as scale_by_simplified_ademamix
from ._ademamix import simplified_ademamix as simplified_ademamix
from ._adopt import adopt as adopt
from ._adopt import scale_by_adopt as scale_by_adopt
from ._cocob import COCOBState as COCOBState
from ._cocob import cocob as cocob
from ._cocob import scale_by_cocob as scale_by_cocob
from ._complex import SplitRealAndImaginaryState as SplitRealAndImaginaryState
from ._complex import split_real_and_imaginary as split_real_and_imaginary
from ._dadapt_adamw import DAdaptAdamWState as DAdaptAdamWState
from ._dadapt_adamw import dadapt_adamw as dadapt_adamw
from ._dog import DogInitStep as DogInitStep
from ._dog import DoGState as DoGState
from ._dog import DoWGState as DoWGState
from ._dog import dog as dog
from ._dog import dowg as dowg
from ._dog import scale_by_dog as scale_by_dog
from ._dog import scale_by_dowg as scale_by_dowg
from ._galore import GaLoreDimensionNumbers as GaLoreDimensionNumbers
from ._galore import GaLoreState as GaLoreState
from ._galore import galore as galore
from ._galore import scale_by_galore as scale_by_galore
from ._madgrad import MadgradState as MadgradState
from ._madgrad import madgrad as madgrad
from ._madgrad import scale_by_madgrad as scale_by_madgrad
from ._mechanic import MechanicState as MechanicState
from ._mechanic import mechanize as mechanize
from ._momo import MomoAdamState as MomoAdamState
from ._momo import MomoState as MomoState
from ._momo import momo as momo
from ._momo import momo_adam as momo_adam
from ._privacy import (
    DifferentiallyPrivateAggregateState as DifferentiallyPrivateAggregateState,
)
from ._privacy import (
    differentially_private_aggregate as differentially_private_aggregate,
)
from ._privacy import dpsgd as dpsgd
from ._prodigy import ProdigyState as ProdigyState
from ._prodigy import prodigy as prodigy
from ._prodigy import scale_by_prodigy as scale_by_prodigy
from ._reduce_on_plateau import ReduceLROnPlateauState as ReduceLROnPlateauState
from ._reduce_on_plateau import reduce_on_plateau as reduce_on_plateau
from ._sam import NormalizeState as NormalizeState
from ._sam import SAMState as SAMState
from ._sam import normalize as normalize
from ._sam import sam as sam
from ._schedule_free import ScheduleFreeState as ScheduleFreeState
from ._schedule_free import schedule_free as schedule_free
from ._schedule_free import schedule_free_adamw as schedule_free_adamw
from ._schedule_free import schedule_free_eval_params as schedule_free_eval_params
from ._schedule_free import schedule_free_sgd as schedule_free_sgd
from ._sophia import HutchinsonState as HutchinsonState
from ._sophia import SophiaState as SophiaState
from ._sophia import (
    hutchinson_estimator_diag_hessian as hutchinson_estimator_diag_hessian,
)
from ._sophia import scale_by_sophia as scale_by_sophia
from ._sophia import sophia as sophia

# optax's private module paths (``optax.contrib._muon``) load on first access.
__getattr__ = package_getattr(__name__)
