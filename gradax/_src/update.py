"""Compatibility shim for `optax._src.update`.

Maps `apply_updates`, `incremental_update` and `periodic_update`, all of
the optax module.

Each name is gradax's own object, defined nowhere here:
`update.apply_updates is gradax.apply_updates`.
See docs/optax-private-paths.md for the measured use of each name.
"""

from gradax import apply_updates as apply_updates
from gradax import incremental_update as incremental_update
from gradax import periodic_update as periodic_update
