"""Loss functions: every name of `optax.losses`, with optax's numbers.

Each loss is a plain function of arrays, safe under `jit`, `vmap` and
`grad`. Where optax returns NaN for a masked class (a `-inf` logit with
label 0) or another limit case, gradax returns the limit with finite
gradients; each function's docstring lists its differences from optax.
"""

from ._binary import hinge_loss as hinge_loss
from ._binary import perceptron_loss as perceptron_loss
from ._binary import sigmoid_binary_cross_entropy as sigmoid_binary_cross_entropy
from ._binary import sigmoid_focal_loss as sigmoid_focal_loss
from ._binary import sparsemax_loss as sparsemax_loss
from ._ctc import ctc_loss as ctc_loss
from ._ctc import ctc_loss_with_forward_probs as ctc_loss_with_forward_probs
from ._divergence import convex_kl_divergence as convex_kl_divergence
from ._divergence import generalized_kl_divergence as generalized_kl_divergence
from ._divergence import kl_divergence as kl_divergence
from ._divergence import (
    kl_divergence_with_log_targets as kl_divergence_with_log_targets,
)
from ._fenchel_young import make_fenchel_young_loss as make_fenchel_young_loss
from ._large_vocab import (
    chunked_softmax_cross_entropy_with_integer_labels as chunked_softmax_cross_entropy_with_integer_labels,  # noqa: E501
)
from ._large_vocab import (
    fused_linear_softmax_cross_entropy as fused_linear_softmax_cross_entropy,
)
from ._multiclass import multiclass_hinge_loss as multiclass_hinge_loss
from ._multiclass import multiclass_perceptron_loss as multiclass_perceptron_loss
from ._multiclass import multiclass_sparsemax_loss as multiclass_sparsemax_loss
from ._ranking import ranking_softmax_loss as ranking_softmax_loss
from ._regression import cosine_distance as cosine_distance
from ._regression import cosine_similarity as cosine_similarity
from ._regression import huber_loss as huber_loss
from ._regression import l2_loss as l2_loss
from ._regression import log_cosh as log_cosh
from ._regression import squared_error as squared_error
from ._segmentation import binary_dice_loss as binary_dice_loss
from ._segmentation import dice_loss as dice_loss
from ._segmentation import (
    multiclass_generalized_dice_loss as multiclass_generalized_dice_loss,
)
from ._self_supervised import ntxent as ntxent
from ._self_supervised import triplet_margin_loss as triplet_margin_loss
from ._smoothing import smooth_labels as smooth_labels
from ._softmax import poly_loss_cross_entropy as poly_loss_cross_entropy
from ._softmax import safe_softmax_cross_entropy as safe_softmax_cross_entropy
from ._softmax import softmax_cross_entropy as softmax_cross_entropy
from ._softmax import (
    softmax_cross_entropy_with_integer_labels as softmax_cross_entropy_with_integer_labels,  # noqa: E501
)
