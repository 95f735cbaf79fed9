"""From a model file to a generated project on disk and built executables (the `build`
command, and the content-addressed cache behind `infer --engine native|qemu`)."""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from .board_fit import resolve_budget
from .codegen.fit import fit
from .codegen.library import render_library
from .codegen.project import BuildOptions, ProjectPlan, plan_project, render_project
from .codegen.project_files import write_project
from .errors import UserError
from .files import cache_root, read_input, read_text
from .frontends import load_model
from .ir import Graph
from .target import DEFAULT_TARGET
from .training.config import TrainConfig

APT_HINT = ("apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm "
            "(or run scripts/setup.sh)")
ARTEFACTS = {"native": "build/native/model", "native-sanitize": "build/native-sanitize/model",
             "qemu": "build/qemu/firmware.elf"}


def _render(model_path: Path, options: BuildOptions, graph: Graph | None
            ) -> tuple[ProjectPlan, dict[str, str]]:
    """Plan and render a model (loaded here unless the caller already has its graph)."""
    graph = graph if graph is not None else load_model(model_path)
    graph, options = fit(graph, options)
    options = resolve_budget(graph, options)
    plan = plan_project(graph, options)
    render = render_library if options.library else render_project
    return plan, render(graph, read_input(model_path, "model"), Path(model_path).name, options,
                        plan)


def generate(model_path: Path, options: BuildOptions, out_dir: Path,
             graph: Graph | None = None, force: bool = False) -> ProjectPlan:
    """Load, plan and render ``model_path`` into ``out_dir``; returns the plans. ``force``:
    replace files of the user's where the project writes (project_files.write_project)."""
    plan, files = _render(model_path, options, graph)
    write_project(files, out_dir, force)
    return plan


def make(project: Path, goal: str, sanitize: bool = False, extra_cflags: str = "",
         soft_float: bool = False) -> Path:
    """Run ``make goal`` in a generated project; returns the artefact it produced.
    ``soft_float``: the QEMU firmware for a core without an FPU (-mfloat-abi=soft, the FPU
    left off), the integer-only check of --estimator int8."""
    compiler = "cc" if goal == "native" else "arm-none-eabi-gcc"
    if shutil.which("make") is None or shutil.which(compiler) is None:
        raise UserError(f"building '{goal}' needs make and {compiler}; install them with "
                        f"{APT_HINT}")
    args = (["make", "-C", str(project), goal] + (["SANITIZE=1"] if sanitize else [])
            + ([f"EXTRA_CFLAGS={extra_cflags}"] if extra_cflags else [])
            + (["SOFT_FLOAT=1"] if soft_float else []))
    result = subprocess.run(args, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"make {goal} failed in {project}:\n{result.stdout}{result.stderr}")
    if goal == "firmware":  # build/<board>/firmware.elf, the board the project was made for
        target = json.loads(read_text(project / "manifest.json", "manifest"))["target"]
        return project / "build" / target / "firmware.elf"
    key = "native-sanitize" if sanitize else goal
    return project / ARTEFACTS[key]


def cached_build(model_path: Path, engine: str, emulate: str = DEFAULT_TARGET,
                 sanitize: bool = False, extra_cflags: str = "", soft_float: bool = False,
                 graph: Graph | None = None, train: TrainConfig | None = None,
                 patches: str = "auto", input_quantize: str = "auto",
                 recompute: str = "auto", data_source: str = "link") -> Path:
    """Build the engine's executable for a model once per distinct generated project.

    The key is a hash of every generated file (so a new zocodegen version, template or model
    rebuilds) plus the goal; a hit skips the compiler entirely. ``engine`` "emulated" builds
    the board firmware of ``emulate`` (make firmware), the ELF the emulated board runs;
    ``data_source`` "sdcard" a field trainer (BuildOptions.data_source).
    """
    target, goal = (emulate, "firmware") if engine == "emulated" else (engine, engine)
    _, files = _render(model_path, BuildOptions(target=target, emulate=emulate, train=train,
                                                patches=patches, recompute=recompute,
                                                input_quantize=input_quantize,
                                                data_source=data_source),
                       graph)
    digest = hashlib.sha256()
    for rel in sorted(files):
        digest.update(rel.encode() + b"\0" + files[rel].encode() + b"\0")
    digest.update(f"{engine}:{sanitize}:{extra_cflags}:{soft_float}".encode())
    project = cache_root() / digest.hexdigest()[:24]
    artefact = project / (f"build/{target}/firmware.elf" if goal == "firmware"
                          else ARTEFACTS["native-sanitize" if sanitize else engine])
    if artefact.is_file():
        return artefact
    project.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=project.parent) as tmp:
        staging = Path(tmp) / "project"
        write_project(files, staging)
        make(staging, goal, sanitize, extra_cflags, soft_float)
        if not artefact.is_file():  # another process may have finished first
            shutil.rmtree(project, ignore_errors=True)
            staging.rename(project)
    return artefact
