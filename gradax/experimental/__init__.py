"""Experimental APIs: `optax.experimental`.

Names here may change between releases, as in optax. :mod:`aggregating`
holds transformations of per-element (per-example) gradients.
"""

from . import aggregating as aggregating
