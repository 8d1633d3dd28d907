"""A user's subclass of GradientTransformation behaves as optax's NamedTuple subclass.

Frameworks extend optax's types: EasyDeL's optimizer package adds a method to
a ``GradientTransformation`` subclass and builds it as ``Cls(init, update)``;
kauldron's ``MultiGradientTransformation`` annotates an attribute, builds
itself through ``super().__new__(cls, init, update)`` and sets the attribute
on the instance. The classes here are written in those two shapes, and each
check runs the same class body against optax and gradax.
"""

import dataclasses
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax


def _init(params):
    return {"seen": jnp.zeros([], jnp.int32)}


def _update(updates, state, params=None):
    del params
    doubled = jax.tree.map(lambda g: 2.0 * g, updates)
    return doubled, {"seen": state["seen"] + 1}


def _stage_local_class(base):
    """EasyDeL's shape: an extra method, built as ``Cls(init, update)``."""

    class StageLocal(base):
        """A transformation with a stage-local entry point."""

        def stage_count(self):
            return 1

    return StageLocal


def _multi_class(base):
    """kauldron's shape: an annotated attribute set in ``__new__``."""

    class Multi(base):
        """A transformation carrying its parts as an instance attribute."""

        parts: dict

        def __new__(cls, init, update, parts):
            obj = super().__new__(cls, init, update)
            obj.parts = parts
            return obj

    return Multi


BASES = {
    "GradientTransformation": (
        optax.GradientTransformation,
        gradax.GradientTransformation,
    ),
    "GradientTransformationExtraArgs": (
        optax.GradientTransformationExtraArgs,
        gradax.GradientTransformationExtraArgs,
    ),
}


@pytest.mark.parametrize("base_name", sorted(BASES))
def test_namedtuple_protocol_matches_optax(base_name):
    results = []
    for base in BASES[base_name]:
        cls = _stage_local_class(base)
        positional = cls(_init, _update)
        keyword = cls(init=_init, update=_update)
        init, update = positional
        replaced = positional._replace(update=None)
        results.append(
            (
                positional == keyword,
                positional[0] is _init and positional[1] is _update,
                positional.init is init and positional.update is update,
                positional.stage_count(),
                isinstance(positional, base),
                isinstance(positional, tuple),
                len(positional),
                (type(replaced) is cls, replaced.init is _init, replaced.update),
                list(positional._asdict()),
                cls._fields,
                repr(positional).split("(")[0],
                jax.tree_util.tree_structure(positional).num_leaves,
            )
        )
    assert results[0] == results[1]
    assert results[1][0:5] == (True, True, True, 1, True)


@pytest.mark.parametrize("base_name", sorted(BASES))
def test_super_new_and_instance_attributes_match_optax(base_name):
    for base in BASES[base_name]:
        cls = _multi_class(base)
        tx = cls(_init, _update, {"loss": "adam"})
        assert tx.parts == {"loss": "adam"}
        tx.note = "set later"  # a NamedTuple subclass has a __dict__
        assert tx.note == "set later"
        assert isinstance(tx, base)
        with pytest.raises(AttributeError):
            tx.init = _update  # the fields stay read-only, as in a NamedTuple


def test_pickles_as_a_namedtuple():
    cls = _stage_local_class(gradax.GradientTransformation)
    globals()["_PickledStageLocal"] = cls
    cls.__qualname__ = "_PickledStageLocal"
    tx = cls(_init, _update)
    restored = pickle.loads(pickle.dumps(tx))
    assert type(restored) is cls and tuple(restored) == (_init, _update)


def test_calls_its_functions_as_they_are():
    tx = _stage_local_class(gradax.GradientTransformation)(_init, _update)
    assert tx.init is _init and tx.update is _update


PARAMS = {"w": jnp.arange(6.0).reshape(2, 3) / 7.0, "b": jnp.array([0.5, -1.0])}
GRADS = [
    jax.tree.map(lambda p, k=k: jnp.sin(p * (k + 1.0)) + 0.1 * k, PARAMS)
    for k in range(4)
]


def _combinators(lib, user_tx):
    """The same configurations of combinators around ``user_tx``, in ``lib``."""
    return {
        "chain": lib.chain(user_tx, lib.scale_by_adam(), lib.scale(-0.1)),
        "masked": lib.masked(user_tx, {"w": True, "b": False}),
        "MultiSteps": lib.MultiSteps(lib.chain(user_tx, lib.sgd(0.1)), 2),
        "apply_if_finite": lib.apply_if_finite(user_tx, 2),
        "inject_hyperparams": lib.inject_hyperparams(
            lambda learning_rate: lib.chain(user_tx, lib.scale(-learning_rate))
        )(learning_rate=lib.linear_schedule(0.1, 0.01, 3)),
        "multi_transform": lib.multi_transform(
            {"user": user_tx, "sgd": lib.sgd(0.1)}, {"w": "user", "b": "sgd"}
        ),
    }


def _run(tx):
    @jax.jit
    def steps(params):
        state = tx.init(params)
        outs = []
        for grads in GRADS:
            updates, state = tx.update(grads, state, params)
            params = jax.tree.map(jnp.add, params, updates)
            outs.append(params)
        return outs, state

    return steps(PARAMS)


def test_accepted_by_every_combinator_with_optax_numbers():
    # One subclass of each library's base in each library's combinators: the
    # parameters after four steps agree. float32, and Adam's steps may order
    # their operations differently: a few ulps of values below 1 per step,
    # so atol 1e-6 after four steps (the differences seen are ~1.5e-8).
    optax_user = _stage_local_class(optax.GradientTransformation)(_init, _update)
    gradax_user = _stage_local_class(gradax.GradientTransformation)(_init, _update)
    expected = _combinators(optax, optax_user)
    got = _combinators(gradax, gradax_user)
    for name in expected:
        (want_params, want_state), (got_params, got_state) = (
            _run(expected[name]),
            _run(got[name]),
        )
        for want, have in zip(want_params, got_params, strict=True):
            jax.tree.map(
                lambda a, b, n=name: np.testing.assert_allclose(
                    a, b, rtol=1e-6, atol=1e-6, err_msg=n
                ),
                want,
                have,
            )
        # The states: optax's tree and its numbers. The classes are each
        # library's own, so the trees are compared by their printed form,
        # which names every node's type (NamedTuple class, dict, OrderedDict).
        assert str(jax.tree.structure(want_state)) == str(
            jax.tree.structure(got_state)
        ), name
        for a, b in zip(
            jax.tree.leaves(want_state), jax.tree.leaves(got_state), strict=True
        ):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=name)


def test_gradax_kind_stays_an_immutable_pytree():
    class scale_by_half(gradax.GradientTransformation):
        """Halves the updates (a gradax-kind subclass: it writes the hooks)."""

        factor: float = 0.5

        def init_state(self, params):
            return gradax.EmptyState()

        def update_state(self, updates, state, params=None, **extra_args):
            return jax.tree.map(lambda g: self.factor * g, updates), state

    tx = scale_by_half()
    assert not isinstance(tx, tuple)
    assert jax.tree.leaves(tx) == [0.5]
    with pytest.raises(dataclasses.FrozenInstanceError):
        tx.factor = 1.0
    assert scale_by_half(factor=0.25).update(jnp.ones(2), ())[0].tolist() == [
        0.25,
        0.25,
    ]


def test_abstract_base_without_hooks_stays_gradax_kind():
    class Halving(gradax.GradientTransformation):
        """A base written for subclasses that supply the hooks."""

        _abstract = True

    class scale_by_half(Halving):
        """Halves the updates."""

        def init_state(self, params):
            return gradax.EmptyState()

        def update_state(self, updates, state, params=None, **extra_args):
            return jax.tree.map(lambda g: 0.5 * g, updates), state

    assert not issubclass(Halving, tuple)
    assert scale_by_half().update(jnp.ones(2), ())[0].tolist() == [0.5, 0.5]


def test_subclass_of_a_user_namedtuple_class_keeps_the_kind():
    staged = _stage_local_class(gradax.GradientTransformation)

    class Deeper(staged):
        """A subclass of the user's class."""

        def depth(self):
            return 2

    tx = Deeper(_init, _update)
    assert isinstance(tx, tuple) and tx.depth() == 2 and tx.stage_count() == 1


def test_gradax_call_of_the_base_still_builds_a_function_transformation():
    tx = gradax.GradientTransformation(_init, _update)
    assert not isinstance(tx, tuple)
    updates, state = tx.update({"w": jnp.ones(2)}, tx.init({"w": jnp.ones(2)}))
    assert updates["w"].tolist() == [2.0, 2.0] and int(state["seen"]) == 1


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def test_every_gradax_class_is_gradax_kind():
    # The rule applies to gradax's own classes too: a base of gradax's that
    # writes no hook and no field must say ``_abstract = True``, or it would
    # silently become a NamedTuple (Aggregator did).
    import gradax.experimental.aggregating  # noqa: F401 - loads its classes

    tuple_kind = sorted(
        f"{c.__module__}.{c.__qualname__}"
        for c in _subclasses(gradax.GradientTransformation)
        if c.__module__.startswith("gradax")
        and issubclass(c, tuple)
        and c is not gradax.NamedTupleTransformation
    )
    assert not tuple_kind
