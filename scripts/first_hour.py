"""A newcomer's first hour, scripted: the README's commands, then five tasks.

In a fresh virtual environment this runs the README's first command (make
the environment, install the ``demo`` extra, ``gradax demo``) and
``gradax bench --quick``, then does what a newcomer does first, with code
taken from the documentation pages as they are written:

1. switch an optax training loop to gradax (``import gradax as optax``);
2. Muon in flax nnx (docs/muon.md, the "flax nnx" snippet);
3. 8-bit AdamW (docs/memory.md);
4. an orbax checkpoint resumed across a configuration change
   (docs/checkpoints.md);
5. three mistakes, each of which must be answered by ``gradax.UpdateError``
   naming the path: gradients of another tree, a state restored without a
   template, integer gradients.

It prints the time of each step and whether it passed, and exits 1 if one
failed. It downloads jax, flax and orbax into the new environment and takes
minutes, so it is not part of the test suite or CI.

Run: python scripts/first_hour.py [--keep DIR] [--no-demo]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def python_blocks(page: str) -> list[str]:
    text = (DOCS / page).read_text()
    return re.findall(r"^```python\n(.*?)^```$", text, re.S | re.M)


def snippet_under(page: str, heading: str) -> str:
    """The one python block under a ``### heading`` of a page."""
    text = (DOCS / page).read_text()
    start = text.index(f"### {heading}\n") + len(f"### {heading}\n")
    following = re.search(r"^##+ ", text[start:], re.M)
    end = len(text) if following is None else start + following.start()
    blocks = re.findall(r"^```python\n(.*?)^```$", text[start:end], re.S | re.M)
    return blocks[0]


# The loop a newcomer already has, written against optax; the switch is the
# import line (docs/differences-from-optax.md).
OPTAX_LOOP = """
import jax
import jax.numpy as jnp
import optax

params = {"w": jnp.zeros(3), "b": jnp.zeros(())}
x = jax.random.normal(jax.random.key(0), (64, 3))
y = x @ jnp.array([1.0, -2.0, 0.5]) + 0.3


def loss_fn(params):
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)


tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-2))
opt_state = tx.init(params)


@jax.jit
def step(params, opt_state):
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


first = None
for _ in range(200):
    params, opt_state, loss = step(params, opt_state)
    first = loss if first is None else first
assert loss < first / 2, (first, loss)
print("loss", float(first), "->", float(loss))
"""

EIGHT_BIT_LOOP = """
params = {"w": jnp.ones((64, 32)), "b": jnp.zeros(32)}
tx = gradax.adamw(3e-4, mu_dtype=q8, nu_dtype=q8)
opt_state = tx.init(params)
grads = jax.tree.map(jnp.ones_like, params)
for _ in range(3):
    updates, opt_state = jax.jit(tx.update)(grads, opt_state, params)
    params = gradax.apply_updates(params, updates)
assert isinstance(opt_state[0].mu["w"], gradax.QuantizedArray)
print("8-bit moments:", type(opt_state[0].mu["w"]).__name__)
"""

MISTAKES = """
import tempfile, warnings
import jax, jax.numpy as jnp
import orbax.checkpoint as ocp
import gradax

params = {"w": jnp.ones((3, 4)), "b": jnp.ones(4)}
tx = gradax.adam(1e-3)
state = tx.init(params)
path = tempfile.mkdtemp() + "/ckpt"
checkpointer = ocp.StandardCheckpointer()
checkpointer.save(path, state)
checkpointer.wait_until_finished()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    restored = checkpointer.restore(path)
mistakes = {
    "gradients of another tree": lambda: tx.update(
        {"w": jnp.ones((3, 4)), "c": jnp.ones(4)}, state
    ),
    "a state restored without a template": lambda: tx.update(
        params, restored, params
    ),
    "integer gradients": lambda: tx.update(
        {"w": jnp.ones((3, 4), jnp.int32), "b": jnp.ones(4)}, state, params
    ),
}
for name, call in mistakes.items():
    try:
        jax.jit(call)()
    except gradax.UpdateError as error:
        message = str(error)
        assert "[" in message, message  # names a path
        print(f"{name}: {type(error).__module__}.{type(error).__name__}: "
              f"{message.splitlines()[0]}")
    else:
        raise AssertionError(f"{name}: no error")
"""


class Run:
    """Times each step; remembers what failed."""

    def __init__(self, venv: Path, work: Path):
        self.venv, self.work = venv, work
        self.rows: list[tuple[str, float, str]] = []

    def step(self, name: str, command: list[str] | str, **kwargs) -> bool:
        print(f"== {name}", flush=True)
        start = time.perf_counter()
        done = subprocess.run(
            command,
            cwd=kwargs.pop("cwd", self.work),
            shell=isinstance(command, str),
            executable="/bin/bash" if isinstance(command, str) else None,
            text=True,
            capture_output=True,
            **kwargs,
        )
        seconds = time.perf_counter() - start
        ok = done.returncode == 0
        tail = (done.stdout + done.stderr).strip().splitlines()[-6:]
        print(textwrap.indent("\n".join(tail), "   "), flush=True)
        self.rows.append((name, seconds, "ok" if ok else "FAILED"))
        return ok

    def python(self, name: str, code: str) -> bool:
        script = self.work / (re.sub(r"\W+", "_", name) + ".py")
        script.write_text(code)
        return self.step(name, [str(self.venv / "bin" / "python"), str(script)])

    def report(self) -> int:
        width = max(len(name) for name, _, _ in self.rows)
        print("\nfirst hour:")
        for name, seconds, status in self.rows:
            print(f"  {name.ljust(width)}  {seconds:8.1f} s  {status}")
        total = sum(seconds for _, seconds, _ in self.rows)
        print(f"  {'total'.ljust(width)}  {total:8.1f} s")
        return 0 if all(status == "ok" for _, _, status in self.rows) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="make the environment here")
    parser.add_argument(
        "--no-demo", action="store_true", help="install only, skip gradax demo"
    )
    parser.add_argument(
        "--tasks-only",
        action="store_true",
        help="reuse the environment in --keep DIR; run only the five tasks",
    )
    args = parser.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="gradax-first-hour-"))
    base.mkdir(parents=True, exist_ok=True)
    venv, work = base / ".venv", base / "work"
    work.mkdir(exist_ok=True)
    run = Run(venv, work)
    activate = f". {venv}/bin/activate"
    if args.tasks_only and not (venv / "bin" / "python").exists():
        parser.error(f"--tasks-only needs an environment made before in {base}")
    if not args.tasks_only:
        # The README's first command, in its three parts, from the repository.
        run.step("make the virtual environment", ["python3", "-m", "venv", str(venv)])
        run.step(
            "pip install -e '.[demo]'",
            f'{activate} && pip install --quiet -e "{ROOT}[demo]"',
        )
        if not args.no_demo:
            run.step(
                "gradax demo",
                f"{activate} && gradax demo --out {work / 'gradax-demo'}",
            )
        run.step(
            "gradax bench --quick (adamw, muon)",
            f"{activate} && gradax bench --quick --only adamw,muon | grep -q optax",
        )
        run.step(
            "pip install flax orbax-checkpoint",
            f"{activate} && pip install --quiet flax orbax-checkpoint",
        )
    switched = OPTAX_LOOP.replace("import optax\n", "import gradax as optax\n", 1)
    run.python("1 switch an optax loop", switched)
    run.python("2 Muon in flax nnx", snippet_under("muon.md", "flax nnx"))
    memory = python_blocks("memory.md")[0]
    run.python(
        "3 8-bit AdamW",
        "import jax\nimport jax.numpy as jnp\n\nimport gradax\n\n"
        + memory
        + EIGHT_BIT_LOOP,
    )
    checkpoints = python_blocks("checkpoints.md")
    run.python("4 orbax resume", checkpoints[0] + "\n" + checkpoints[1])
    run.python("5 three mistakes", MISTAKES)
    status = run.report()
    if args.keep is None:
        shutil.rmtree(base, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
