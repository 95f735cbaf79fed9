"""What the digits grid runs (benchmarks/experiment.py): its budget, methods, cells and seeds,
and the records a run leaves (Run, Result, MemoryRow), shared by the runner, the report
(experiment_report.py) and the plots (experiment_plots.py)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from zocodegen.datasets import FAMILIES, SEVERITIES
from zocodegen.training.config import DEFAULT_ESTIMATOR

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
MODELS = ("digits_cnn", "digits_resnet")
CEILINGS = FIXTURES / "ceilings.json"
DOC = ROOT / "docs" / "experiment.md"
RUNS = ROOT / "build" / "experiment"
MARK_START, MARK_END = "<!-- grid:start -->", "<!-- grid:end -->"
#: One run per core of the 2-core machine the budget below was sized on.
WORKERS = 2
#: The full grid's budget: one epoch over the adapt split, Q perturbations per layer and step
#: (the paper simulates with Q = 100 and runs Q = 50 on the device; Q = 20 keeps the whole grid
#: at about an hour on 2 cores, see docs/experiment.md).
EPOCHS = 1
QUERIES = 20
SEEDS = (1, 2, 3)
#: More seeds for ZO only and hybrid C = 1 in every cell: ZO only's seeds 4-6 against its own
#: seeds 1-3 show how far two seed means of the same method differ (an A/A comparison), and
#: six seeds halve the noise of the hybrid's comparison (docs/experiment.md, "seed noise").
NOISE_SEEDS = (4, 5, 6)
NOISE_METHODS = ("ours", "hybrid-1")
#: The family the ablations run on (both severities, both models): its FP32 ceiling is far
#: above no adaptation, so there is a lot to recover and the methods separate.
ABLATION_FAMILY = "blur"
TUNED_LRS = ("0.003", "0.01", "0.03")
#: ElasticZO's hybrid: the model's last C trainable layers by back-propagation (--bp-layers C).
HYBRID_LAYERS = (1, 2)
#: The board whose generated build's memory report gives the memory table.
MEMORY_TARGET = "stm32f746"


@dataclass(frozen=True)
class Method:
    """A row of the tables: its CLI options on top of the shared budget."""
    key: str
    label: str
    options: tuple[str, ...]


OURS = Method("ours", "ours (defaults: --lr auto, guard)", ())
MEZO = Method("mezo", "MeZO (model-wise, same forward passes)", ("--estimator", "mezo"))
HYBRIDS = tuple(Method(f"hybrid-{c}", f"hybrid C={c}", ("--bp-layers", str(c)))
                for c in HYBRID_LAYERS)
#: At an equal forward budget (the issue's comparison): the hybrid spends the queries its BP
#: layer no longer needs on the ZO layers, Q L / (L - 1) each; ElasticZO-INT8's two-sided
#: queries are two forwards each, so it runs Q / 2 (placeholders resolved per model by
#: ``method_options``).
EQUAL_BUDGET = (Method("hybrid-1-eq", "hybrid C=1, equal forwards",
                       ("--bp-layers", "1", "--queries", "{q_equal:1}")),
                Method("int8", "ElasticZO-INT8 (Q/2 two-sided)",
                       ("--estimator", "int8", "--queries", "{q_half}")))
#: PeZO's perturbation sources and distribution, P-RGE's two-sided queries (issue 17), each
#: on top of our defaults at the same forward budget (two-sided: Q / 2 queries of two
#: forwards). Pool and generator counts are the paper's guideline (Sec. 4.3: 2^12 values,
#: 2^5 generators, both minus one).
PERTURBATIONS = (Method("pool", "pool:4095", ("--perturbation", "pool:4095")),
                 Method("rotating", "rotating:31", ("--perturbation", "rotating:31")),
                 Method("uniform", "uniform", ("--distribution", "uniform")),
                 Method("pool-uniform", "pool:4095 uniform",
                        ("--perturbation", "pool:4095", "--distribution", "uniform")),
                 Method("two-sided", "two-sided (Q/2)", ("--two-sided", "--queries", "{q_half}")))
GRID_METHODS = (OURS, MEZO) + HYBRIDS + EQUAL_BUDGET + PERTURBATIONS
TUNED = tuple(Method(f"tuned-{lr}", f"ours, lr {lr}, no guard", ("--lr", lr, "--no-guard"))
              for lr in TUNED_LRS)
ABLATION_METHODS = TUNED + (
    Method("wp", "WP only", ("--estimator", "wp")),
    Method("np", "NP only", ("--estimator", "np")),
    Method("no-gnorm", "no gradient-norm scaling", ("--no-gnorm-scaling",)),
    Method("no-quant", "no quantization-aware scaling", ("--no-quant-scaling",)),
    Method("sparse", "sparse (one of 4 blocks, --block auto)", ("--train", "sparse")),
)
#: Estimators judged against the default (issue 48, benchmarks/estimator_screen.py): not in the
#: grid. adaptive was the default before docs/decisions/np-channel-default.md.
CANDIDATES = (Method("adaptive", "adaptive (WP or NP per layer, the default before)",
                     ("--estimator", "adaptive")),
              Method("np-channel", "np-channel (NP layers as adaptive, CH where it uses WP)",
                     ("--estimator", "np-channel")),
              Method("channel", "channel (CH in every layer: biases only)",
                     ("--estimator", "channel")))
METHODS = {m.key: m for m in GRID_METHODS + ABLATION_METHODS + CANDIDATES}
#: The runs whose curves docs/experiment_grid_<model>.png shows.
PLOTTED = ("ours", "mezo", "wp", "np", "sparse", "hybrid-1", "hybrid-2")


@dataclass(frozen=True)
class Grid:
    """What to run: the cells (family, severity) of every model, the seeds, the ablation
    family, and the per-run budget as CLI options (``--epochs E`` or, for --quick, --steps)."""
    models: tuple[str, ...]
    cells: tuple[tuple[str, int], ...]
    seeds: tuple[int, ...]
    ablation_family: str
    budget: tuple[str, ...]
    queries: int
    noise_seeds: tuple[int, ...] = ()
    noise_methods: tuple[str, ...] = ()

    @property
    def tag(self) -> str:
        """The cache folder of this budget and default estimator: runs with other budgets, or
        made under another default (every method builds on it), never mix."""
        budget = "-".join(o.lstrip("-") for o in self.budget)
        return f"{budget}-q{self.queries}-{DEFAULT_ESTIMATOR}"

    @property
    def ablation_cells(self) -> tuple[tuple[str, int], ...]:
        return tuple(c for c in self.cells if c[0] == self.ablation_family)


FULL = Grid(MODELS, tuple((f, s) for f in FAMILIES for s in SEVERITIES), SEEDS,
            ABLATION_FAMILY, ("--epochs", str(EPOCHS)), QUERIES, NOISE_SEEDS, NOISE_METHODS)
QUICK = Grid(MODELS, ((ABLATION_FAMILY, 1),), (1,), ABLATION_FAMILY, ("--steps", "30"), 4)


@dataclass(frozen=True)
class Run:
    model: str
    family: str
    severity: int
    method: str
    seed: int

    @property
    def cell(self) -> str:
        return f"{self.family}/{self.severity}"

    def directory(self, root: Path) -> Path:
        """RUN folder: root/model/family-severity/method/seedS."""
        cell = f"{self.family}-{self.severity}"
        return root / self.model / cell / self.method / f"seed{self.seed}"


@dataclass(frozen=True)
class Result:
    """Test accuracy before and after training, the run's wall time and its query forwards
    (what the CLI reports; None if unknown)."""
    before: float
    after: float
    seconds: float | None = None
    forwards: int | None = None


def grid_runs(grid: Grid) -> list[Run]:
    """Every run of ``grid``: the grid methods (ours, MeZO, the hybrids) in every cell, the
    ablations on the ablation family's cells; MeZO first (the longest runs first pack the
    two workers best)."""
    runs = [Run(m, f, s, method.key, seed) for m in grid.models for f, s in grid.cells
            for seed in grid.seeds for method in GRID_METHODS]
    runs += [Run(m, f, s, method.key, seed) for m in grid.models for f, s in grid.ablation_cells
             for seed in grid.seeds for method in ABLATION_METHODS]
    runs += [Run(m, f, s, method, seed) for m in grid.models for f, s in grid.cells
             for seed in grid.noise_seeds for method in grid.noise_methods]
    return sorted(runs, key=lambda r: r.method != MEZO.key)



#: The training items of a build's memory report, in the order of the paper's Eq. 2-4:
#: parameters theta, the gradient region (ZO's gradient / BP's g and e), saved activations a,
#: and the arena's tail, where the zeroth-order gradient regions and the saved activations
#: live where the arena has no dead bytes for them (docs/memory.md).
MEMORY_ITEMS = ("trainable parameters", "gradient buffer", "saved activations",
                "training state", "arena tail")


@dataclass(frozen=True)
class MemoryRow:
    """One row of the memory table: a model trained with C back-propagated layers, the
    build's memory items (bytes, None if the build failed), the plan's BP head share of the
    gradient region and its query forwards per step."""
    model: str
    label: str
    bp_layers: int
    items: dict[str, int] | None
    head_bytes: int
    forwards_per_step: int


