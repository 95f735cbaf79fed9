"""--query-batch B, P-RGE's outer loop (p-rge.txt Sec. 3.1, Alg. 1 line 4) on a
microcontroller: B query forwards of one training step travel through the network together,
so every layer after the perturbed one is one kernel call on a batch of B (the kernels take
a batch: CONV 1x1 and FC multiply B times the pixels / rows with each weight load). Pure:
graph + plans + the model's code -> what model.c and training.c need.

The batched forward runs on its own arena (``model_query_arena_storage``), planned for the
graph's tail (the op after the first trained one to the logits) with every activation B wide;
slot b of a tensor is the b-th of its B equal parts. For trained layer l the engine
(zo_train.c) copies what ops l + 1 .. logits read from before them (but l's output) from the
sample's saved slot into every slot of the query arena, fills slot b of l's output, and runs
ops l + 1 .. logits once:
  * WP: slot b of l's output is op l on the saved input with query b's perturbed weights
    (the layer's own kernel, batch 1);
  * NP: slot b of l's output is h(z + xi_b).
The integers of every slot are those of a one-query forward, so the simulator needs no
change: the chain simulator == native == QEMU covers it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import UserError
from ..ir import Graph
from ..ops.table import OPS
from ..planner import ArenaPlan, plan_arena
from ..training.plan import crossing_tensors
from ..training.plan_types import TrainingPlan
from .layers.common import LayerContext
from .model_code import Layer, ModelCode, _tensor_line, _train_copies, c_comment

STORAGE = "model_query_arena_storage"


@dataclass(frozen=True)
class BatchSpan:
    """A tensor a batched forward needs from before its first op: slot 0's offset in the
    query arena, one slot's bytes, and where the layer's saved copy keeps it."""

    batch_offset: int
    bytes: int
    saved_offset: int


@dataclass(frozen=True)
class BatchLayer:
    """Where one trained layer's batched queries read and write."""

    op: int
    restart: tuple[BatchSpan, ...]  # what ops l + 1 .. logits read from before, but l's output
    output_offset: int  # slot 0 of op l's output


@dataclass(frozen=True)
class BatchCode:
    batch: int
    first_op: int
    last_op: int
    arena_bytes: int
    layers: tuple[Layer, ...]  # model.c's batched layer functions, ops first..last
    # (first: the op after the first trained one; first > last when that is the logits op)
    logits_offset: int  # slot 0 of the logits
    trained: tuple[BatchLayer, ...]

    def layer(self, op: int) -> BatchLayer:
        return next(t for t in self.trained if t.op == op)


def batched_graph(graph: Graph, first: int, last: int, batch: int) -> Graph:
    """Ops first..last with every activation they touch ``batch`` wide (leading axis); the
    tensors produced before ``first`` become the graph's inputs, and so does the output of
    op last when there is no op (first > last)."""
    ops = graph.ops[first:last + 1]
    made = {name for op in ops for name in op.outputs}
    tensors: dict = {}  # only what the ops touch: the planner places every tensor it is given
    inputs: list[str] = []
    for op in ops:
        for name in (*op.inputs, *op.outputs):
            if not name or name in tensors:
                continue
            t = graph.tensor(name)
            if t.is_constant:
                tensors[name] = t
                continue
            if not t.shape or t.shape[0] != 1:
                raise UserError(f"--query-batch needs a leading batch axis of 1 on every "
                                f"activation after the first trained layer; tensor '{name}' "
                                f"has shape {list(t.shape)}: use --query-batch 1")
            tensors[name] = replace(t, shape=(batch,) + tuple(t.shape[1:]))
            if name not in made:
                inputs.append(name)
    logits = graph.ops[last].outputs[0]
    if not ops:
        t = graph.tensor(logits)
        tensors[logits] = replace(t, shape=(batch,) + tuple(t.shape[1:]))
        inputs.append(logits)
    return Graph(f"{graph.name} x{batch}", graph.source_format, tensors, list(ops), inputs,
                 [logits])


def _batch_spans(graph: Graph, plan: ArenaPlan, names: tuple[str, ...],
                 saved: dict[str, int]) -> tuple[BatchSpan, ...]:
    return tuple(BatchSpan(plan.offsets[n], graph.tensor(n).nbytes, saved[n]) for n in names)


def query_batch_code(graph: Graph, code: ModelCode, plans: tuple[TrainingPlan, ...],
                     saved_offsets: dict[int, dict[str, int]], switched: bool
                     ) -> BatchCode | None:
    """The batched tail of the model for ``plans`` (None with --query-batch 1).
    ``saved_offsets``: per trained op, each crossing tensor's offset in its saved slot."""
    batch = plans[0].config.query_batch
    layers = [layer for plan in plans for layer in plan.zo_layers]
    if batch == 1 or not layers:
        return None
    first, last = min(layer.op_index for layer in layers) + 1, plans[0].logits_op
    bgraph = batched_graph(graph, first, last, batch)
    bplan = plan_arena(bgraph)
    trainable = {layer.op_index for plan in plans for layer in plan.layers}
    known = {a.name for a in code.arrays}
    out_layers = []
    for k, op in enumerate(bgraph.ops):
        main = code.layers[first + k]
        symbol = main.function[len(f"layer_{first + k:02d}_"):]
        made = OPS[op.type].generate(op, LayerContext(bgraph, bplan, symbol, k, STORAGE))
        missing = {a.name for a in made.arrays
                   if first + k in trainable or not a.training_only} - known
        assert not missing, f"batched layer {first + k} needs arrays the model lacks: {missing}"
        calls = (_train_copies(made.calls, symbol, "_active" if switched else "_train")
                 if first + k in trainable else made.calls)
        tensors = ([_tensor_line(bgraph, bplan, "in", n) for n in op.inputs if n]
                   + [_tensor_line(bgraph, bplan, "out", n) for n in op.outputs])
        out_layers.append(Layer(first + k, main.op_name, op.type, main.function + "_batch",
                                c_comment(made.summary), tuple(tensors), calls, made.note))
    trained = []
    for layer in {layer.op_index: layer for layer in layers}.values():
        node = tuple(n for n in crossing_tensors(graph, layer.op_index + 1, last)
                     if n != layer.output)
        trained.append(BatchLayer(
            layer.op_index, _batch_spans(graph, bplan, node, saved_offsets[layer.op_index]),
            bplan.offsets[layer.output]))
    return BatchCode(batch, first, last, bplan.arena_bytes, tuple(out_layers),
                     bplan.offsets[plans[0].logits], tuple(trained))
