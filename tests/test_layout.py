"""The package's layout: one subpackage per algorithm family, small modules, imports
that go one way (ops -> envs, policies, postprocessing, replay -> algos -> cli) with no
circle."""

import ast
from pathlib import Path

import marllib_ext

PACKAGE = Path(marllib_ext.__file__).parent
MAX_LINES = 400
LAYERS = {  # a module may import its own layer and the ones below
    "ops": 0,
    "errors": 0,
    "configs": 0,
    "envs": 1,  # simulators and their array contract
    "policies": 1,
    "replay": 1,
    "rllib_compat": 1,
    "plotting": 1,
    "report": 1,  # statistics and plots of runs' evaluation records
    "rollout": 2,  # samplers, over envs
    "postprocessing": 3,  # learner batches, from rollout blocks
    "algos": 4,
    "sweeps": 5,
    "experiments": 5,  # experiment files on Ray Tune
    "cli": 6,
    "__init__": 7,
}


def module_name(path: Path) -> str:
    parts = ("marllib_ext", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every ``marllib_ext`` module ``path`` imports, at any depth of the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("marllib_ext"):
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("marllib_ext"))
    return found


def graph() -> dict[str, set[str]]:
    """Module -> the modules it imports. A package's ``__init__`` importing its own
    submodules re-exports them; those edges are left out, so every circle left is one
    that an import order can trip over."""
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {
        name: {
            target
            for target in imports_of(path)
            if target in paths
            and target not in (name, "marllib_ext")  # ``from marllib_ext import algos``
            and not (path.name == "__init__.py" and target.startswith(name + "."))
        }
        for name, path in paths.items()
    }


def layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS[parts[1] if len(parts) > 1 else "__init__"]


def test_no_module_is_over_400_lines():
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long


def test_algos_root_holds_only_what_every_family_shares():
    assert len(list((PACKAGE / "algos").glob("*.py"))) <= 10
    families = {p.parent.name for p in (PACKAGE / "algos").glob("*/__init__.py")}
    assert {
        "ppo",
        "coma",
        "happo",
        "efx",
        "safe",
        "roer",
        "team_replay",
        "joint_q",
        "ddpg",
    } <= families
    assert (PACKAGE / "cli" / "__init__.py").exists()


def test_imports_go_down_the_layers():
    upward = [
        (module, target)
        for module, targets in graph().items()
        for target in targets
        if layer(target) > layer(module)
    ]
    assert not upward


def test_the_import_graph_has_no_circle():
    edges = graph()
    state: dict[str, int] = {}
    circles = []

    def visit(node, path):
        state[node] = 1
        for target in sorted(edges[node]):
            if state.get(target) == 1:
                circles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target, [*path, target])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    assert not circles


def test_one_update_loop_runs_every_on_policy_schedule():
    overrides = [
        path.relative_to(PACKAGE).as_posix()
        for path in (PACKAGE / "algos").rglob("*.py")
        if "def update(" in path.read_text()
    ]
    assert overrides == ["algos/ppo/phased.py"]
