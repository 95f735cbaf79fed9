"""Code generator: IR + memory plan -> a firmware project rendered from Jinja2 templates."""
from .project import (BUILD_TARGETS, BuildOptions, ProjectPlan, device_graph, plan_project,
                      render_project, resolve_auto, resolve_blocks, resolve_bp_layers,
                      write_project)

__all__ = ["BUILD_TARGETS", "BuildOptions", "ProjectPlan", "device_graph", "plan_project",
           "render_project",
           "resolve_auto", "resolve_blocks", "resolve_bp_layers", "write_project"]
