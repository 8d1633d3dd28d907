"""PSGD Kron against psgd-jax's newest kron.py (be95524), float64.

    python benchmarks/references/kron_current.py  # fetch psgd_jax first

Writes tests/optimizers/fixtures/kron_psgd_jax_be95524.json, which
tests/optimizers/test_kron.py compares gradax's `kron(output_clip="rms",
damping=True, precond_update="interval")` against. The problem is the one
of the 39d4620 fixture (kron_psgd_jax.json): g = c (p - t) + 0.2 p^3 on a
4x3 matrix and a vector, p <- p - lr * update. The reference's random
probe vectors are replaced by numbers drawn here (one set per step, by
shape), which the test feeds to gradax the same way. Two runs: the factors
updated at every step (p = 1) and every second step (p = 0.5, the
interval rule's counter).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from references._harness import checkout, load  # noqa: E402

REPO = "evanatyourservice/psgd_jax"
FETCH_DIR = Path("/work/.mirror")
OUT = (
    Path(__file__).resolve().parents[2]
    / "tests/optimizers/fixtures/kron_psgd_jax_be95524.json"
)
STEPS, LR, B1 = 12, 0.1, 0.9


def problem():
    old = json.loads(OUT.with_name("kron_psgd_jax.json").read_text())
    c = {k: np.asarray(v) for k, v in old["c"].items()}
    t = {k: np.asarray(v) for k, v in old["t"].items()}
    start = {k: np.asarray(v) for k, v in old["params"][0].items()}
    rng = np.random.default_rng(20241231)
    probes = [{k: rng.standard_normal(v.shape) for k, v in start.items()}]
    probes += [
        {k: rng.standard_normal(v.shape) for k, v in start.items()}
        for _ in range(STEPS - 1)
    ]
    return c, t, start, probes


def run(module, probability: float, c, t, start, probes):
    shapes = {k: v.shape for k, v in start.items()}
    step = [0]

    def normal(key, shape=(), dtype=float):
        (name,) = [k for k, s in shapes.items() if s == tuple(shape)]
        return jax.numpy.asarray(probes[step[0]][name], dtype)

    real_normal = jax.random.normal
    jax.random.normal = normal
    try:
        tx = module.scale_by_kron(
            b1=B1,
            preconditioner_update_probability=probability,
            precond_update_precision="highest",
            precond_grads_precision="highest",
        )
        params = {k: jax.numpy.asarray(v) for k, v in start.items()}
        state = tx.init(params)
        out = [jax.tree.map(np.asarray, params)]
        for i in range(STEPS):
            step[0] = i
            p = out[-1]
            grads = {k: c[k] * (p[k] - t[k]) + 0.2 * p[k] ** 3 for k in p}
            grads = jax.tree.map(jax.numpy.asarray, grads)
            updates, state = tx.update(grads, state, params)
            params = jax.tree.map(lambda a, u: a - LR * u, params, updates)
            out.append(jax.tree.map(np.asarray, params))
    finally:
        jax.random.normal = real_normal
    return out


def main() -> None:
    jax.config.update("jax_enable_x64", True)
    co = checkout(FETCH_DIR, REPO, ("psgd_jax/kron.py",), "ref_psgd_current")
    # The reference imports optax._src.clipping, which newer optax moved to
    # optax.transforms (it reads nothing from it).
    import optax._src
    import optax.transforms._clipping as clipping

    sys.modules.setdefault("optax._src.clipping", clipping)
    optax._src.clipping = clipping  # type: ignore[attr-defined]
    module = load("ref_psgd_current", "psgd_jax.kron")
    c, t, start, probes = problem()
    runs = {
        str(p): [
            {k: v.tolist() for k, v in ps.items()}
            for ps in run(module, p, c, t, start, probes)
        ]
        for p in (1.0, 0.5)
    }
    OUT.write_text(
        json.dumps(
            {
                "reference": f"github.com/{REPO}",
                "file": "psgd_jax/kron.py",
                "commit": co.commit,
                "how": (
                    "scale_by_kron(b1=0.9, preconditioner_update_probability=p, "
                    "precisions 'highest') in float64 on CPU, jax.random.normal "
                    "replaced by the probe vectors V (V[i] at step i); g = c * "
                    "(p - t) + 0.2 * p**3; p <- p - lr * update"
                ),
                "lr": LR,
                "b1": B1,
                "c": {k: v.tolist() for k, v in c.items()},
                "t": {k: v.tolist() for k, v in t.items()},
                "V": [{k: v.tolist() for k, v in p.items()} for p in probes],
                "params": runs,
            }
        )
    )
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes) at {co.commit[:7]}")


if __name__ == "__main__":
    main()
