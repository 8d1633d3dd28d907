"""Why a keyword argument of `update` went missing: optax's wrapper dropped it.

`optax.with_extra_args_support(tx)` returns `tx` itself for optax's own
transformations and, for any other object, a wrapper whose `update` drops
every keyword argument (it tells them apart with `isinstance` against
optax's NamedTuple class, which a gradax transformation is not). Code that
still imports optax calls it on the transformation it is handed: numpyro's
`optax_to_numpyro` (which then passes `value=` at every step), and optax's
`chain` for each of its members. A gradax transformation that needs
`value=` (`reduce_on_plateau`, `polyak_sgd`) then gets none, though the
caller passed it; its error says so.
"""

from __future__ import annotations

import sys

_WRAPPER_MODULE = "optax._src.base"


def _is_optax_wrapper(frame) -> bool:  # noqa: ANN001 - a frame object
    """Whether `frame` runs the `update` that `with_extra_args_support` made."""
    if frame.f_globals.get("__name__") != _WRAPPER_MODULE:
        return False
    code = frame.f_code
    qualified = getattr(code, "co_qualname", None)  # Python >= 3.11
    if qualified is not None:
        return qualified == "with_extra_args_support.<locals>.update"
    return code.co_name == "update" and "tx" in code.co_freevars


def dropped_by_optax() -> str:
    """A sentence for the error of an `update` missing a keyword argument.

    It names optax's wrapper where that wrapper called the `update` now
    failing (an empty string otherwise). Walks the stack, so call it only on
    the way to an error.
    """
    frame = sys._getframe(1)
    while frame is not None:
        if _is_optax_wrapper(frame):
            return (
                " It was called through optax.with_extra_args_support, which "
                "drops every keyword argument given to a transformation that "
                "is not optax's own (numpyro's optax_to_numpyro and optax's "
                "chain wrap each one so): the caller's value= never reached "
                "it. It gets one only from a caller that passes keyword "
                "arguments to it itself: gradax's combinators, or a training "
                "step calling tx.update(..., value=loss)."
            )
        frame = frame.f_back
    return ""
