"""Rules of the code base: registry coverage, import direction, private names."""

from __future__ import annotations

import ast
from pathlib import Path

from registry import ENTRIES, MODULES, NOT_IN_REGISTRY, TESTS

import gradax

PACKAGE = Path(gradax.__file__).parent


def _public_transformations():
    names = set()
    for module in (gradax, gradax.contrib):
        for name in dir(module):
            obj = getattr(module, name)
            if isinstance(obj, type) and issubclass(obj, gradax.GradientTransformation):
                names.add(name)
    return names


def test_every_public_transformation_has_a_registry_entry_or_a_reason():
    registered = {entry.name for entry in ENTRIES}
    missing = sorted(_public_transformations() - registered - set(NOT_IN_REGISTRY))
    assert not missing, f"add registry entries (tests/registry*.py) for {missing}"
    stale = sorted(set(NOT_IN_REGISTRY) & registered)
    assert not stale, f"remove from NOT_IN_REGISTRY, now registered: {stale}"


def _package_of(name: str) -> str:
    """The folder of tests/ that files ``name``'s entries: its gradax package."""
    obj = getattr(gradax, name, None) or getattr(gradax.contrib, name)
    package = obj.__module__.split(".")[1]
    return "core" if package.startswith("_") else package


def test_each_registry_entry_is_filed_with_its_package():
    misfiled = sorted(
        f"{entry.name}: from {Path(module.__file__).parent.name}/{module.__name__}"
        f".py to {package}/registry_{package}.py"
        for module in MODULES
        for entry in module.ENTRIES
        for package in [_package_of(entry.name)]
        if module.__file__ != str(TESTS / package / f"registry_{package}.py")
    )
    assert not misfiled, f"move these registry entries: {misfiled}"


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(relative.parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        yield ".".join(parts), is_package, ast.parse(path.read_text())


def _imports(module: str, is_package: bool, tree: ast.Module):
    """(imported module, imported names) for each gradax import of a module."""
    package = module if is_package else module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == "gradax" or target.startswith("gradax."):
                yield target, [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("gradax."):
                    yield alias.name, []


def _is_submodule(package: str, name: str) -> bool:
    folder = PACKAGE.parent.joinpath(*package.split("."))
    return (folder / f"{name}.py").exists() or (folder / name).is_dir()


def _unit(module: str) -> str:
    """The node of the import graph: a subpackage, or a top-level module."""
    parts = module.split(".")
    return ".".join(parts[:2])


def test_no_import_cycle_between_gradax_packages():
    graph: dict[str, set[str]] = {}
    for module, is_package, tree in _modules():
        if module == "gradax":
            continue  # the public facade re-exports everything
        source = _unit(module)
        for target, names in _imports(module, is_package, tree):
            targets = [target]
            if target == "gradax":  # `from .. import tree` imports submodules
                targets = [f"gradax.{name}" for name in names]
            for t in targets:
                unit = _unit(t)
                if unit != source and unit != "gradax":
                    graph.setdefault(source, set()).add(unit)

    cycles = []

    def visit(node, path):
        for nxt in sorted(graph.get(node, ())):
            if nxt in path:
                cycle = path[path.index(nxt) :] + [nxt]
                if cycle[0] == min(cycle[:-1]):
                    cycles.append(" -> ".join(cycle))
            else:
                visit(nxt, path + [nxt])

    for start in sorted(graph):
        visit(start, [start])
    assert not cycles, "import cycles between packages:\n" + "\n".join(
        sorted(set(cycles))
    )


def test_only_the_src_shim_imports_the_top_level_package():
    # Every arrow points down: a subpackage imports the modules it needs, not
    # the facade that imports it. gradax._src (optax's private module paths,
    # docs/optax-private-paths.md) is the one documented exception: it maps
    # optax's names onto the finished package.
    upward = []
    for module, is_package, tree in _modules():
        if module == "gradax" or module.startswith("gradax._src"):
            continue
        for target, names in _imports(module, is_package, tree):
            if target != "gradax":
                continue
            # `from .. import tree` imports a submodule: an edge down to it.
            named = [n for n in names if not _is_submodule("gradax", n)]
            if named:
                upward.append(f"{module} imports {named} from gradax")
    assert not upward, "\n".join(upward)


def test_no_private_name_is_imported_across_packages():
    offenders = []
    for module, is_package, tree in _modules():
        source = _unit(module)
        for target, names in _imports(module, is_package, tree):
            if _unit(target) == source:
                continue
            private = [
                n
                for n in names
                if n.startswith("_")
                and not n.startswith("__")
                and not _is_submodule(target, n)  # `from . import _x` is a module
            ]
            if private:
                offenders.append(f"{module} imports {private} from {target}")
    assert not offenders, "\n".join(offenders)


def _private_module_of(target: str) -> str | None:
    """The subpackage whose private module ``target`` is, or None.

    ``gradax.tree._access`` is private to ``gradax.tree``. The private
    packages and modules at the top level (``gradax._core``, the kernel;
    ``gradax._optax``; ``gradax._compat``) are the shared internals every
    package builds on (docs/writing-a-transformation.md, "Modules"), so
    they are not counted.
    """
    parts = target.split(".")
    for i, part in enumerate(parts[2:], start=2):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def test_no_private_module_is_imported_from_another_package():
    offenders = []
    for module, is_package, tree in _modules():
        if module.startswith("gradax._src"):
            continue  # optax's private paths, served on purpose
        package = module if is_package else module.rsplit(".", 1)[0]
        for target, names in _imports(module, is_package, tree):
            owners = [_private_module_of(target)]
            # `from ..tree import _access` names the private module itself.
            owners += [
                target
                for n in names
                if n.startswith("_")
                and not n.startswith("__")
                and _is_submodule(target, n)
                and target != "gradax"
            ]
            for owner in owners:
                if owner and not (package + ".").startswith(owner + "."):
                    offenders.append(f"{module} imports {target} (private to {owner})")
    assert not offenders, "\n".join(offenders)


def test_no_jax_private_module_is_used():
    offenders = [
        str(path.relative_to(PACKAGE.parent))
        for path in sorted(PACKAGE.rglob("*.py"))
        if "jax._src" in path.read_text() or "jax/_src" in path.read_text()
    ]
    assert not offenders, f"jax._src is not a public API: {offenders}"


def test_transforms_and_schedules_import_their_names_eagerly():
    # optax.transforms and optax.schedules names (combinators among them,
    # inject_hyperparams with the schedules) are imported by the packages
    # themselves, where static tools see them: no lazy re-export from the
    # top-level package (an arrow back up).
    import gradax.schedules
    import gradax.transforms

    for package in (gradax.transforms, gradax.schedules):
        source = Path(package.__file__).read_text()
        assert "reexport_lazily" not in source and "TYPE_CHECKING" not in source
        tree = ast.parse(source)
        names = {
            alias.asname or alias.name
            for node in tree.body
            if isinstance(node, ast.ImportFrom)
            for alias in node.names
        } - {"package_getattr"}
        assert names, package.__name__
        for name in sorted(names):
            assert getattr(package, name) is getattr(gradax, name), name
    assert not (PACKAGE / "_lazy.py").exists()


def test_import_gradax_loads_nothing_of_the_cli():
    # A fresh interpreter: `import gradax` must not import gradax_cli (nor
    # its optional dependencies). The import time is printed for the record
    # (a timing is never asserted).
    import subprocess
    import sys

    code = (
        "import sys, time; t = time.perf_counter(); import gradax; "
        "t = time.perf_counter() - t; "
        "cli = sorted(m for m in sys.modules if m.startswith('gradax_cli')); "
        "extras = sorted(m for m in ('matplotlib', 'rich', 'tqdm', 'optax') "
        "if m in sys.modules); print(cli, extras, round(t, 3))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split("]")
    assert out[0].strip() == "[", f"import gradax loaded {out[0]}]"
    assert out[1].strip(" ,") == "[", f"import gradax loaded {out[1]}]"
    print("import gradax took", out[2].strip(), "s")


def test_plain_module_names_are_the_ones_other_packages_import():
    # The naming rule (docs/writing-a-transformation.md, "Which modules are
    # public"): a module inside a subpackage has a plain name exactly when a
    # module of another package (gradax/__init__.py included) imports it; the
    # other direction is test_no_private_module_is_imported_from_another_package.
    modules = {m: is_package for m, is_package, _ in _modules()}
    imported_from_outside = set()
    for module, is_package, tree in _modules():
        package = module if is_package else module.rsplit(".", 1)[0]
        for target, names in _imports(module, is_package, tree):
            for candidate in (target, *(f"{target}.{n}" for n in names)):
                if modules.get(candidate) is not False:
                    continue  # not a module (a name, or a package)
                owner = candidate.rsplit(".", 1)[0]
                if not (package + ".").startswith(owner + "."):
                    imported_from_outside.add(candidate)
    misnamed = sorted(
        module
        for module, is_package in modules.items()
        if not is_package
        and module.count(".") >= 2
        and not module.startswith("gradax._src")
        and not module.rsplit(".", 1)[1].startswith("_")
        and module not in imported_from_outside
    )
    assert not misnamed, (
        f"only their own package imports {misnamed}: give them a leading underscore"
    )


def _transformation_classes():
    import importlib
    import pkgutil

    classes = set()
    for info in pkgutil.walk_packages(gradax.__path__, "gradax."):
        if info.name.startswith("gradax._src"):
            continue  # optax's private paths: re-exports only
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, gradax.GradientTransformation)
                and value.__module__.startswith("gradax")
            ):
                classes.add(value)
    return classes


def test_a_class_is_abstract_or_final():
    # Shared behaviour lives in an abstract base (``_abstract = True``);
    # nadam is no subclass of adam. The protocol's own bases are abstract by
    # their role: a user's subclass is what they are for.
    bases = {
        gradax.GradientTransformation,
        gradax.GradientTransformationExtraArgs,
        gradax.Alias,
        gradax.NamedTupleTransformation,
        gradax.FunctionTransformation,
    }
    classes = _transformation_classes()
    subclassed = sorted(
        f"{cls.__module__}.{cls.__qualname__} subclasses {base.__qualname__}"
        for cls in classes
        for base in cls.__mro__[1:]
        if base in classes
        and base not in bases
        and not base.__dict__.get("_abstract", False)
    )
    assert not subclassed, "\n".join(subclassed)


def test_the_root_shows_the_architecture():
    # The root holds the public modules, __init__ and __main__, at most three
    # private files (the shims CI reads by path), and packages; the kernel
    # lives in gradax/_core/. No two names differ only by an underscore
    # (declare/_declare, sharding/_sharding were such twins).
    files = sorted(p.name for p in PACKAGE.glob("*.py"))
    private = [f for f in files if f.startswith("_") and not f.startswith("__")]
    assert private == ["_compat.py", "_requirements.py"], private
    names = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()}
    names = {n for n in names if not n.startswith("__") and n != "py"}
    twins = sorted(n for n in names if n.startswith("_") and n[1:] in names)
    assert not twins, twins
