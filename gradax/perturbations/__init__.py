"""Differentiable perturbed functions: `optax.perturbations`.

:func:`make_perturbed_fun` smooths any function (even a piecewise constant
one, like an argmax) by averaging it over random perturbations of its input,
with Monte-Carlo derivatives of every order; :class:`Gumbel` and
:class:`Normal` are the built-in noise distributions.
"""

from ._noise import Gumbel as Gumbel
from ._noise import Normal as Normal
from ._perturbed import make_perturbed_fun as make_perturbed_fun
