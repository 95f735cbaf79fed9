"""Who may import whom (docs/layout.md): the core never imports the host tools, every import
resolves the way it is written in the source tree, and no module imports itself round a
circle, counting the package ``__init__`` files an import runs. Read from the source with
``ast``; one test then imports every module on its own to confirm it."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: Source folders and the package names they are installed as (pyproject.toml).
FOLDERS = {"zocodegen": "zocodegen", "host": "zocodegen.host", "qemu": "zocodegen.qemu",
           "targets": "zocodegen.targets", "templates": "zocodegen.templates"}
#: The command line and the Python API façade: above the host tools, so they may use them.
FACADE = {"zocodegen.api", "zocodegen.cli", "zocodegen.cli_fleet", "zocodegen.cli_options",
          "zocodegen.__main__"}
HOST = "zocodegen.host"


def _modules() -> dict[str, tuple[Path, str]]:
    """Installed module name -> (file, top-level source folder)."""
    out = {}
    for folder, package in FOLDERS.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = [p for p in path.relative_to(REPO / folder).with_suffix("").parts
                     if p != "__init__"]
            out[".".join([package, *parts])] = (path, folder)
    return out


MODULES = _modules()


def _package_of(name: str) -> list[str]:
    path = MODULES[name][0]
    parts = name.split(".")
    return parts if path.name == "__init__.py" else parts[:-1]


def _type_checking_lines(tree: ast.Module) -> set[int]:
    """Lines of ``if TYPE_CHECKING:`` blocks: imports there name types for annotations and
    never run."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.If) and isinstance(node.test, ast.Name)
                and node.test.id == "TYPE_CHECKING"):
            lines.update(range(node.lineno, node.end_lineno + 1))
    return lines


def _imports(name: str, runtime_only: bool = False) -> list[tuple[int, str, int]]:
    """(line, imported module, relative level) of every import in a module, the ones inside
    functions too, and inside TYPE_CHECKING blocks unless ``runtime_only``."""
    tree = ast.parse(MODULES[name][0].read_text())
    skip = _type_checking_lines(tree) if runtime_only else set()
    found = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", 0) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, 0) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(name)[:len(_package_of(name)) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES]
            targets = subs if len(subs) == len(node.names) else [target, *subs]
            found += [(node.lineno, t, node.level) for t in targets]
    return found


def _with_packages(importer: str, target: str) -> set[str]:
    """``target`` and the packages Python initialises to import it: ``a.b.c`` runs
    ``a/__init__`` and ``a/b/__init__`` first, except the importer's own enclosing packages
    (already initialised, or being initialised, when the importer runs)."""
    parts = target.split(".")
    own = {".".join(importer.split(".")[:k]) for k in range(1, importer.count(".") + 1)}
    parents = {".".join(parts[:k]) for k in range(1, len(parts))}
    return {target} | {p for p in parents if p in MODULES and p not in own}


def _edges(runtime_only: bool = True) -> dict[str, set[str]]:
    """Module -> the modules importing it runs (type-only imports run nothing), or with
    ``runtime_only=False`` the modules it names, its annotations' types included."""
    return {name: {m for _, t, _ in _imports(name, runtime_only=runtime_only) if t in MODULES
                   for m in _with_packages(name, t) if m != name}
            for name in MODULES}


def _is_core(name: str) -> bool:
    return (name.startswith("zocodegen.") and name not in FACADE
            and not name.startswith((HOST, "zocodegen.qemu", "zocodegen.targets",
                                     "zocodegen.templates")))


def test_the_core_never_imports_the_host_tools():
    wrong = [f"{MODULES[name][0].relative_to(REPO)}:{line} imports {target}"
             for name in MODULES if _is_core(name)
             for line, target, _ in _imports(name)
             if target == HOST or target.startswith(HOST + ".")]
    assert not wrong, "the core imports host/ (move what both need into the core):\n" + \
        "\n".join(wrong)


def test_relative_imports_stay_inside_their_folder():
    """host/x.py's ``from ..errors`` works only once installed as zocodegen.host: outside its
    own folder a module names the core absolutely (``from zocodegen.errors``)."""
    wrong = []
    for name, (path, folder) in MODULES.items():
        depth = len(_package_of(name)) - len(FOLDERS[folder].split("."))
        for line, target, level in _imports(name):
            if level and level - 1 > depth:
                wrong.append(f"{path.relative_to(REPO)}:{line} climbs out of {folder}/ "
                             f"to {target}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("runtime_only", [True, False], ids=["imports", "type-hints-too"])
def test_no_import_cycles(runtime_only):
    """No circle of imports, and none through type hints either: a type two modules both
    name lives below both (training/plan_types.py below the estimators' steps and the plan)."""
    edges = _edges(runtime_only)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_every_module_imports_on_its_own():
    """Each module imported first, in a fresh interpreter state, finds every name it needs
    (a circle through a package's ``__init__`` shows here as a partially initialised module)."""
    names = sorted(n for n in MODULES if not n.endswith("__main__")
                   and not n.startswith(("zocodegen.targets", "zocodegen.templates")))
    script = (
        "import importlib, sys\n"
        "failed = []\n"
        f"for name in {names!r}:\n"
        "    for loaded in [m for m in sys.modules if m.startswith('zocodegen')]:\n"
        "        del sys.modules[loaded]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as exc:\n"
        "        failed.append(f'{name}: {type(exc).__name__}: {exc}')\n"
        "print('\\n'.join(failed))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "", done.stdout


def test_the_checks_see_a_violation():
    """The rules above read real imports: the façade does import the host."""
    assert any(t.startswith(HOST) for _, t, _ in _imports("zocodegen.cli"))
    assert "zocodegen.errors" in _edges()["zocodegen.cli"]


def test_board_names_come_from_the_targets_folder():
    """Boards are discovered (targets/*/target.json): no Python module outside targets/
    spells a board's name in code (docstrings and comments may)."""
    boards = [p.parent.name for p in sorted((REPO / "targets").glob("*/target.json"))]
    assert len(boards) >= 2
    from zocodegen.target import TARGET_NAMES
    assert list(TARGET_NAMES) == boards
    spelled = []
    for name, (path, folder) in MODULES.items():
        if folder == "targets":
            continue
        tree = ast.parse(path.read_text())
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef))
                      and n.body and isinstance(n.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in docstrings
                    and any(board in node.value for board in boards)):
                spelled.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value[:60]!r}")
    assert not spelled, "board names written by hand:\n" + "\n".join(spelled)


def test_c_files_under_templates_are_plain_c():
    """Only *.j2 files are templates (tables, sizes, #defines); every .c / .h beside them is
    compiled as it stands, so a compiler and a reader see the logic (docs/layout.md)."""
    templated = [str(p.relative_to(REPO)) for p in sorted((REPO / "templates").rglob("*"))
                 if p.suffix in (".c", ".h") and ("{%" in p.read_text() or "{{" in p.read_text())]
    assert not templated, f"Jinja markup in plain C files: {templated}"
    assert not (REPO / "templates" / "project" / "main.c.j2").exists()
