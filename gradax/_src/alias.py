"""Compatibility shim for `optax._src.alias`, optax's module of optimizers.

Maps all of its optimizers (`adam`, `adamw`, `sgd`, `lbfgs`, ...) and
`MaskOrFn`. Real code imports them from here, names them in configuration
files (`optax._src.alias.adamw`) or walks the module for a registry of
optimizers. gradax's optimizers are classes: a walk that keeps what
`inspect.isfunction` accepts finds none of them; keep what is callable.

Each name is gradax's own object, defined nowhere here:
`alias.adam is gradax.adam`.
See docs/optax-private-paths.md for the measured use of each name.
"""

from gradax import MaskOrFn as MaskOrFn
from gradax import adabelief as adabelief
from gradax import adadelta as adadelta
from gradax import adafactor as adafactor
from gradax import adagrad as adagrad
from gradax import adam as adam
from gradax import adamax as adamax
from gradax import adamaxw as adamaxw
from gradax import adamw as adamw
from gradax import adan as adan
from gradax import amsgrad as amsgrad
from gradax import fromage as fromage
from gradax import lamb as lamb
from gradax import lars as lars
from gradax import lbfgs as lbfgs
from gradax import lion as lion
from gradax import nadam as nadam
from gradax import nadamw as nadamw
from gradax import noisy_sgd as noisy_sgd
from gradax import novograd as novograd
from gradax import optimistic_adam as optimistic_adam
from gradax import optimistic_adam_v2 as optimistic_adam_v2
from gradax import optimistic_gradient_descent as optimistic_gradient_descent
from gradax import polyak_sgd as polyak_sgd
from gradax import radam as radam
from gradax import rmsprop as rmsprop
from gradax import rprop as rprop
from gradax import sgd as sgd
from gradax import sign_sgd as sign_sgd
from gradax import signum as signum
from gradax import sm3 as sm3
from gradax import yogi as yogi
