"""--layers first, the command line's default trainable layers (docs/decisions/first-layers.md):
the leading layers whose queries cost at most FIRST_LAYERS_FORWARDS forwards a step, every
layer of a small model, resolved once for the model so every engine trains the same layers."""
from __future__ import annotations

from pathlib import Path

import pytest

from zocodegen import api
from zocodegen.cli_options import train_config
from zocodegen.errors import UserError
from zocodegen.frontends import load_model
from zocodegen.ops.table import macs
from zocodegen.training.config import COMMAND_LINE_QUERIES, LAYERS_FIRST, parse_layer_list
from zocodegen.training.plan import (FIRST_LAYERS_FORWARDS, first_layers, loss_head,
                                     resolve_layers, trainable_ops)
from zocodegen.training.runner import board_run

FIXTURES = Path(__file__).parent / "fixtures"


def _query_forwards(graph, layers) -> float:
    """Whole forwards a query of each of ``layers`` re-runs, summed: op l to the loss."""
    _, logits = loss_head(graph)
    per_op = [macs(graph, op) for op in graph.ops[:logits + 1]]
    ops = trainable_ops(graph)
    return sum(sum(per_op[ops[i]:]) for i in layers) / sum(per_op)


@pytest.mark.parametrize("name,expected", [("scale_model.tflite", tuple(range(6))),
                                           ("scale_model_128.tflite", tuple(range(6))),
                                           ("digits_cnn.tflite", (0, 1, 2, 3)),
                                           ("digits_resnet.tflite", tuple(range(6)))])
def test_first_layers_keep_a_query_within_the_forwards(name, expected):
    graph = load_model(FIXTURES / name)
    chosen = first_layers(graph)
    assert chosen == expected
    assert _query_forwards(graph, chosen) <= FIRST_LAYERS_FORWARDS
    if len(chosen) < len(trainable_ops(graph)):  # one more layer would cost too much
        assert _query_forwards(graph, chosen + (len(chosen),)) > FIRST_LAYERS_FORWARDS


def test_the_command_line_defaults_to_first_layers_and_q20():
    args = api.options("simulate", {"model": FIXTURES / "scale_model.tflite", "data": "d",
                                    "output": "run"}, {})
    run = train_config(args)
    assert run.layers == LAYERS_FIRST and run.queries == COMMAND_LINE_QUERIES == 20
    graph = load_model(FIXTURES / "scale_model.tflite")
    said: list[str] = []
    chosen = board_run(graph, run, "stm32f746", say=said.append)
    assert chosen.layers == tuple(range(6)) and chosen.mode == "full"
    assert any(line.startswith("--layers first (default): the first 6 of 45") for line in said)
    assert resolve_layers(graph, chosen) == chosen  # resolved once, recorded resolved


def test_layer_words():
    assert parse_layer_list("all") == ()
    assert parse_layer_list("first") == LAYERS_FIRST
    assert parse_layer_list("0,2-3") == (0, 2, 3)
    with pytest.raises(UserError, match="--layers expects indices"):
        parse_layer_list("firsts")
