"""Measure another revision of zocodegen with its own code (the benchmarks' --at / --baseline).

A revision is checked out with ``git worktree add`` into a temporary directory; a
benchmark's worker then runs in a subprocess whose PYTHONPATH is a package view of that
checkout (``zocodegen`` with its ``host``, ``templates``, ``targets`` and ``qemu`` folders, laid
out as ``pip install`` would), so every module and template it renders is the revision's,
not the working tree's (a plain PYTHONPATH to the checkout would still take
``zocodegen.host`` and the templates from the editable install of the working tree).

Per-layer instruction counts need the profiling hook of templates/project/model.c.j2 and
main.c.j2 (``#ifdef ZO_PROFILE_LAYERS``). A revision without it gets the hook as a patch:
the difference between those two templates with and without their ``ZO_PROFILE_LAYERS``
blocks, applied with ``git apply`` (which refuses when the context does
not match): first the hook as the commit that introduced it wrote it, then the working
tree's. When neither applies, the revision is measured without per-layer counts.
"""
from __future__ import annotations

import contextlib
import difflib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROFILE_MACRO = "ZO_PROFILE_LAYERS"
PROFILE_TEMPLATES = ("templates/project/model.c.j2", "templates/project/main.c.j2")
#: setup.py-free package layout (pyproject.toml [tool.setuptools.package-dir]).
PACKAGE_DIRS = {"host": "host", "templates": "templates", "targets": "targets", "qemu": "qemu"}


def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


@dataclass(frozen=True)
class Tree:
    """Code to measure: the working tree (root REPO, no package view), a checkout of ``rev``
    or a source directory."""
    label: str  # what tables call it: "working tree", "3694617" or a directory
    root: Path
    rev: str | None = None  # full commit hash of a checkout
    pythonpath: Path | None = None  # the package view a worker runs with
    profile_note: str = ""  # how the profiling hook got there ("" when it was there already)

    @property
    def is_working_tree(self) -> bool:
        return self.pythonpath is None


def working_tree() -> Tree:
    return Tree(describe_working_tree(), REPO)


def describe_working_tree() -> str:
    """``abc1234`` or ``abc1234 + uncommitted changes to N files`` (generator code only)."""
    head = git("rev-parse", "--short", "HEAD")
    dirty = [line for line in git("status", "--porcelain", "--untracked-files=no",
                                  "--", "zocodegen", "templates", "host", "qemu", "targets")
             .splitlines() if line.strip()]
    return head + (f" + uncommitted changes to {len(dirty)} files" if dirty else "")


def unprofiled(text: str) -> str:
    """``text`` as if preprocessed with ZO_PROFILE_LAYERS undefined: every ``#ifdef
    ZO_PROFILE_LAYERS`` block reduced to its ``#else`` branch (other directives untouched)."""
    out: list[str] = []
    stack: list[tuple[bool, bool]] = []  # per open #if: (ours, keeping lines now)
    for line in text.splitlines(keepends=True):
        word = line.strip().split()
        directive = word[0] if word and word[0].startswith("#") else ""
        keeping = all(keep for _, keep in stack)
        if directive in ("#ifdef", "#ifndef", "#if"):
            ours = directive in ("#ifdef", "#ifndef") and word[1:2] == [PROFILE_MACRO]
            if ours:
                stack.append((True, directive == "#ifndef"))
                continue
            stack.append((False, True))
        elif directive in ("#else", "#endif") and stack:
            ours, keep = stack[-1]
            if directive == "#else":
                stack[-1] = (ours, not keep if ours else keep)
            else:
                stack.pop()
            if ours:
                continue
        if keeping:
            out.append(line)
    return "".join(out)


def profile_patch(texts: dict[str, str]) -> str:
    """The profiling hook of templates ``texts`` (path -> text) as a unified diff against the
    same templates without it."""
    chunks = []
    for rel, text in texts.items():
        chunks += difflib.unified_diff(unprofiled(text).splitlines(keepends=True),
                                       text.splitlines(keepends=True), f"a/{rel}", f"b/{rel}")
    return "".join(chunks)


def hook_sources() -> list[tuple[str, dict[str, str]]]:
    """Where the hook can come from, in the order tried: the templates of the commit that
    introduced it (whose context is the code before it, so it applies to older commits) and
    the working tree's templates (which apply to commits like the working tree)."""
    sources = []
    first = git("log", "--reverse", "--format=%H", "-S", PROFILE_MACRO, "--",
                PROFILE_TEMPLATES[0]).split()
    if first:
        sources.append((f"commit {first[0][:7]}",
                        {rel: subprocess.run(["git", "-C", str(REPO), "show",
                                              f"{first[0]}:{rel}"], capture_output=True,
                                             text=True, check=True).stdout
                         for rel in PROFILE_TEMPLATES}))
    sources.append(("the working tree", {rel: (REPO / rel).read_text()
                                         for rel in PROFILE_TEMPLATES}))
    return sources


def _template(checkout: Path, rel: str) -> Path:
    """A profiling template in a checkout, under its name there: main.c.j2 became main.c
    when it stopped being a template."""
    path = checkout / rel
    return path if path.exists() else path.with_suffix("")


def _install_hook(checkout: Path) -> str:
    if all(PROFILE_MACRO in _template(checkout, rel).read_text() for rel in PROFILE_TEMPLATES):
        return ""
    for source, texts in hook_sources():
        patch = profile_patch(texts)
        if patch and subprocess.run(["git", "-C", str(checkout), "apply", "-"], input=patch,
                                    text=True, capture_output=True).returncode == 0:
            return f"profiling hook of {source} applied to its model.c.j2 / main.c.j2"
    return "no per-layer counts: no profiling hook applies to its model.c.j2 / main.c.j2"


def _package_view(checkout: Path, site: Path) -> None:
    """site/zocodegen: the checkout's zocodegen/ entries plus host, templates, targets, qemu
    as symbolic links."""
    package = site / "zocodegen"
    package.mkdir(parents=True)
    for entry in (checkout / "zocodegen").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name, folder in PACKAGE_DIRS.items():
        (package / name).symlink_to(checkout / folder)


@contextlib.contextmanager
def checkout(rev: str) -> Iterator[Tree]:
    """A detached worktree of ``rev`` (removed afterwards) with its package view."""
    commit = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    tmp = Path(tempfile.mkdtemp(prefix="zobench-"))
    root = tmp / "tree"
    git("worktree", "add", "--detach", str(root), commit)
    try:
        note = _install_hook(root)
        _package_view(root, tmp / "site")
        yield Tree(commit[:7], root, commit, tmp / "site", note)
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(root)],
                       capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def source_tree(root: Path) -> Iterator[Tree]:
    """A source directory that is not a commit (e.g. `git archive` of one), with its package
    view; nothing is checked out or patched."""
    tmp = Path(tempfile.mkdtemp(prefix="zobench-"))
    try:
        _package_view(root.resolve(), tmp / "site")
        yield Tree(str(root), root.resolve(), pythonpath=tmp / "site")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_worker(script: Path, tree: Tree, job: dict, timeout: float | None = None) -> dict:
    """Run ``script --worker`` with ``tree``'s code on ``job``; returns its JSON answer.
    The worker's progress lines (stderr) pass through."""
    with tempfile.TemporaryDirectory() as tmp:
        job_file, answer = Path(tmp) / "job.json", Path(tmp) / "answer.json"
        job_file.write_text(json.dumps(job))
        env = dict(os.environ, PYTHONPATH=str(tree.pythonpath), ZOBENCH_TREE=str(tree.root))
        subprocess.run([sys.executable, str(script), "--worker", str(job_file), str(answer)],
                       env=env, check=True, timeout=timeout)
        return json.loads(answer.read_text())


def check_worker_code() -> None:
    """In a worker: stop unless the zocodegen imported is the tree's it was started for."""
    import zocodegen
    from importlib import resources
    expected = os.environ.get("ZOBENCH_TREE")
    if not expected:
        return
    for module in (Path(zocodegen.__file__),
                   Path(str(resources.files("zocodegen.templates")))):
        if not str(module.resolve()).startswith(str(Path(expected).resolve())):
            raise SystemExit(f"worker imported {module}, not the code of {expected}")
