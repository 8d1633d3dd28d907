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

from ._declare import ANY as ANY
from ._declare import DECAY as DECAY
from ._declare import LEARNING_RATE as LEARNING_RATE
from ._declare import NONNEGATIVE as NONNEGATIVE
from ._declare import NONNEGATIVE_INT as NONNEGATIVE_INT
from ._declare import POSITIVE as POSITIVE
from ._declare import POSITIVE_INT as POSITIVE_INT
from ._declare import UNIT as UNIT
from ._declare import HyperparameterError as HyperparameterError
from ._declare import HyperparameterWarning as HyperparameterWarning
from ._declare import OneOf as OneOf
from ._declare import Range as Range
from ._declare import hyper as hyper
from ._declare import static_field as static_field

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
