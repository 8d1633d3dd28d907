"""Every registry entry wrapped in ``shard_state`` gives the unsharded numbers.

The conformance suite's sharded check (tests/conformance/test_conformance.py) runs each
entry on sharded parameters; here each entry's state is instead split over
the ``data`` axis of an 8-device mesh while the parameters stay replicated
(ZeRO-1), on Auto and on Explicit axes. Compiling is the cost, so entries
are batched: one program runs the first two steps of many entries. The
default run checks a representative set (elementwise, global norms,
factored statistics, 8-bit state, matrix functions, the Muon family,
control-flow wrappers); ``-m slow`` checks every entry.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from conformance_base import matrix_function_atol, quadratic_grads, sharding_params
from jax_versions import axis_type_params, set_mesh
from registry import ENTRIES, entry_id

import gradax

P = jax.sharding.PartitionSpec
STEPS = 2  # the second step reads state the first one wrote (split)

# One entry of each kind of computation over the state.
REPRESENTATIVE = (
    "adam",  # elementwise
    "adamw",
    "sgd",
    "lion",
    "clip_by_global_norm",  # a global norm: a reduction over split leaves
    "adafactor",  # factored statistics: row and column means
    "lamb",  # per-leaf trust ratio
    "offload_state",  # 8-bit state in host memory: codes and block scales
    "muon",  # orthogonalized by whole matrices under the mesh
    "shampoo",  # inverse roots of split preconditioners
    "apply_if_finite",
    "MultiSteps",
)


def _fast_entries():
    seen, out = set(), []
    for entry in ENTRIES:
        if entry.name in REPRESENTATIVE and entry.name not in seen:
            seen.add(entry.name)
            out.append(entry)
    return out


# Entries whose first two steps invert or diagonalize statistics built from
# one or two gradients: rank-deficient (rank <= 2 of 6 or 8), so their
# eigenvectors and regularized inverse roots on the null space are set by
# rounding (a null-space eigenvalue of rounding size against eps changes the
# inverse root by O(1)). Splitting the state sums the statistics in another
# order, so the numbers differ by up to ~2e-4 of the leaf's scale on Auto
# meshes: a comparison of rounding noise, not of the wrapper. Their state
# split is still checked. The representative Shampoo entry (preconditioning
# from step 1, 4x4 blocks: rank-1 statistics at its first inverse root) is
# one of them: 1.9e-4 of the leaf's scale on jax 0.12.1 with the suite's
# compile options (the tolerance is 1e-4); 1.3e-6 on jax 0.10.2 and 5.6e-6
# on 0.12.1 with XLA's default options. Its numbers are
# compared with the parameters sharded in
# tests/conformance/test_conformance.py (test_sharded_equals_unsharded).
RANK_DEFICIENT_AT_START = {
    "shampoo[start_preconditioning_step-block_size]",
    "shampoo[b2-preconditioning_compute_steps-start_preconditioning_step-"
    "grafting_type-nesterov]",
    "soap[precondition_frequency]",
    "scale_by_soap[precondition_frequency-normalize_grads]",
}


def _run(txs, params, grads):
    """``STEPS`` updates of each transformation; its updates and final state."""
    out = {}
    for key, tx in txs.items():
        p, state, history = params, tx.init(params), []
        for step in range(STEPS):
            g = grads if step == 0 else quadratic_grads(p, float(step))
            updates, state = tx.update(g, state, p)
            p = gradax.apply_updates(p, updates)
            history.append(updates)
        out[key] = (history, state)
    return out


def _mesh(axis_type):
    kind = getattr(jax.sharding.AxisType, axis_type)
    return jax.make_mesh((8,), ("data",), axis_types=(kind,))


def check(entries, axis_types=("Auto", "Explicit")):
    params = sharding_params()
    grads = quadratic_grads(params, 0.0)
    keys = {f"{i}:{entry_id(e)}": e for i, e in enumerate(entries)}
    plain = {k: e.build() for k, e in keys.items()}
    wrapped = {k: gradax.shard_state(tx, axis="data") for k, tx in plain.items()}
    expected = jax.jit(_run)(plain, params, grads)
    failures = []
    for axis_type in axis_types:
        mesh = _mesh(axis_type)
        with set_mesh(mesh):
            replicated = jax.NamedSharding(mesh, P())
            got = jax.jit(_run)(
                wrapped,
                jax.device_put(params, replicated),
                jax.device_put(grads, replicated),
            )
        for key, entry in keys.items():
            history, state = got[key]
            want_history, want_state = expected[key]
            # Split: every state leaf shaped like a parameter that has a
            # dimension of 8 ("v", "m", "t") is held 1/8 a device.
            for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
                name = getattr(path[-1], "key", None)
                like = params.get(name) if isinstance(name, str) else None
                if like is not None and leaf.shape == like.shape and like.ndim:
                    sizes = {s.data.size for s in leaf.addressable_shards}
                    if sizes != {leaf.size // 8}:
                        failures.append(
                            f"{key} {axis_type}: {jax.tree_util.keystr(path)} "
                            f"{leaf.shape} held as shards of {sizes}"
                        )
            if entry_id(entry) in RANK_DEFICIENT_AT_START:
                continue
            want = jax.tree.leaves(want_history)
            pairs = zip(want, jax.tree.leaves(history), strict=True)
            for a, b in pairs:
                # Same tolerance as the conformance suite's sharded check
                # (see matrix_function_atol): elementwise entries differ only
                # by the compiler's choice of fused multiply-adds (a rounding
                # or two, ~1e-7 relative), reductions over a split dimension
                # add partial sums in another order (~1e-7 relative), and
                # matrix functions amplify both by their conditioning.
                try:
                    np.testing.assert_allclose(
                        b, a, rtol=1e-5, atol=matrix_function_atol(entry, a)
                    )
                except AssertionError as error:
                    failures.append(f"{key} {axis_type}: {str(error)[:300]}")
    assert not failures, "\n".join(failures)


def _representative_params():
    """The representative entries this jax runs, in one batch; each entry
    that needs a newer jax (Entry.requires) alone, skipped with its reason."""
    entries = _fast_entries()
    assert {e.name for e in entries} == set(REPRESENTATIVE)
    here = [e for e in entries if e.runs_here]
    return [pytest.param(here, id="representative")] + [
        pytest.param([e], id=entry_id(e), marks=e.marks)
        for e in entries
        if not e.runs_here
    ]


# Explicit axes need jax 0.7.0 (tests/jax_versions.py).
@pytest.mark.parametrize("axis_type", axis_type_params("Auto", "Explicit"))
@pytest.mark.parametrize("entries", _representative_params())
def test_representative_entries_sharded_over_data(entries, axis_type):
    check(entries, (axis_type,))


CHUNK = 24


@pytest.mark.slow
@pytest.mark.parametrize("start", range(0, len(ENTRIES), CHUNK))
def test_every_entry_sharded_over_data(start):
    check(ENTRIES[start : start + CHUNK])
