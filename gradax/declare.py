"""Declaring hyperparameters: valid ranges, checked at construction.

For writing a transformation of your own (see the guide "Writing a
transformation"): declare each numeric field with :func:`hyper` and a
:class:`Range` (or :class:`OneOf`), and gradax validates it when the object is
built, with an error naming the argument and the valid range. A value that
is valid but usually a mistake (`Range(warn_below=...)`: a negative learning
rate) is accepted with one :class:`HyperparameterWarning` instead.

Example:
  >>> import gradax
  >>> from gradax.declare import DECAY, hyper
  >>> class scale_by_decay(gradax.GradientTransformation):
  ...     decay: float = hyper(default=0.9, valid=DECAY)
  >>> try:
  ...     scale_by_decay(1.5)
  ... except gradax.HyperparameterError as error:
  ...     print(error)
  decay must be in [0, 1) (a number, an array, a schedule), got 1.5
"""

from ._core.declarations import ANY as ANY
from ._core.declarations import DECAY as DECAY
from ._core.declarations import LEARNING_RATE as LEARNING_RATE
from ._core.declarations import NONNEGATIVE as NONNEGATIVE
from ._core.declarations import NONNEGATIVE_INT as NONNEGATIVE_INT
from ._core.declarations import POSITIVE as POSITIVE
from ._core.declarations import POSITIVE_INT as POSITIVE_INT
from ._core.declarations import UNIT as UNIT
from ._core.declarations import HyperparameterError as HyperparameterError
from ._core.declarations import HyperparameterWarning as HyperparameterWarning
from ._core.declarations import OneOf as OneOf
from ._core.declarations import Range as Range
from ._core.declarations import hyper as hyper
from ._core.declarations import static_field as static_field

__all__ = [
    "ANY",
    "DECAY",
    "LEARNING_RATE",
    "NONNEGATIVE",
    "NONNEGATIVE_INT",
    "POSITIVE",
    "POSITIVE_INT",
    "UNIT",
    "HyperparameterError",
    "HyperparameterWarning",
    "OneOf",
    "Range",
    "hyper",
    "static_field",
]
