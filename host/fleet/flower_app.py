"""The fleet on Flower (flwr's Message API): a ServerApp that runs FleetServer's rounds over
the SuperNodes connected to the SuperLink, and a ClientApp that wraps one device
(DeviceClient). Only messages move here; the decisions are in server.py and client.py.

Run configuration (``flwr run --run-config``, defaults in ``app/pyproject.toml``): model,
build, out, rounds, steps-per-round, min-devices, wait (s for them to connect), deadline
(s per round), test (optional .npz). Node configuration (``flower-supernode --node-config``):
image, build, state, and one of port / native / qemu.
"""
from __future__ import annotations

import time
from pathlib import Path

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from zocodegen.errors import DataError, UserError
from zocodegen.formats.link import DEFAULT_BAUD
from ..link.server import LinkError
from ..devices import open_device
from .client import DeviceClient
from .server import FleetServer, test_split
from .updates import FleetModel, Update

server_app = ServerApp()
client_app = ClientApp()


def _connected(grid: Grid, count: int, wait: float) -> list[int]:
    """The connected nodes once ``count`` are there (all of them after ``wait`` seconds)."""
    deadline = time.monotonic() + wait
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= count or time.monotonic() > deadline:
            return nodes
        time.sleep(0.5)


def _describe(entry: dict) -> str:
    kept = [p for p in entry["participants"] if p["accepted"]]
    left = [f"node {p['node']}: {p['reason']}" for p in entry["participants"]
            if not p["accepted"]]
    accuracy = f", test accuracy {100 * entry['accuracy']:.1f}%" if "accuracy" in entry else ""
    return (f"round {entry['round']}: {len(kept)} of {len(entry['participants'])} devices "
            f"averaged, {entry['upload_bytes']} B up (FedAvg of full parameters: "
            f"{entry['fedavg_upload_bytes']} B), {entry['download_bytes']} B down{accuracy}"
            + ("; left out: " + "; ".join(left) if left else ""))


#: How often the server asks the SuperLink for replies (Grid.send_and_receive waits 3 s)
POLL_SECONDS = 0.2


def _exchange(grid: Grid, messages: list[Message], deadline: float) -> dict[int, Message]:
    """Replies by destination node, those that came before the deadline. A reply is matched
    by the id of the message it answers: the SuperLink answers for a node it lost."""
    ids = list(grid.push_messages(messages))
    node_of = {mid: m.metadata.dst_node_id for mid, m in zip(ids, messages)}
    replies: dict[int, Message] = {}
    end = time.monotonic() + deadline
    while len(replies) < len(ids) and time.monotonic() < end:
        pending = [mid for mid in ids if node_of[mid] not in replies]
        for reply in grid.pull_messages(pending):
            replies[node_of[reply.metadata.reply_to_message_id]] = reply
        time.sleep(POLL_SECONDS)
    return replies


@server_app.main()
def serve(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    model = FleetModel.load(Path(str(cfg["model"])), Path(str(cfg["build"])))
    server = FleetServer(model, Path(str(cfg["out"])), int(cfg["steps-per-round"]),
                         int(cfg["rounds"]), test_split(str(cfg.get("test", "")), model))
    if server.round:
        print(f"fleet: resuming at round {server.round} from {server.out}", flush=True)
    elif server.test is not None:
        print(f"fleet: before training, test accuracy {100 * server.accuracy_before():.1f}%",
              flush=True)
    held: dict[int, str] = {}  # parameters hash each device reported holding
    while not server.done:
        nodes = _connected(grid, int(cfg["min-devices"]), float(cfg["wait"]))
        if not nodes:
            raise UserError("no device joined the fleet")
        server.begin()
        messages = [Message(RecordDict({"instruction": ConfigRecord(
            server.instruction(node, held.get(node)))}), dst_node_id=node,
            message_type="train") for node in nodes]
        replies = _exchange(grid, messages, float(cfg["deadline"]))
        for node, reply in sorted(replies.items()):
            if reply.has_error():
                server.left_out(node, f"the device's app failed: {reply.error.reason}")
                continue
            answer = dict(reply.content["answer"])
            held[node] = str(answer.pop("holds", ""))
            device = str(answer.pop("device", ""))
            if "error" in answer:
                server.left_out(node, str(answer["error"]), device)
                continue
            try:
                update = Update(str(answer["kind"]), bytes(answer["payload"]),
                                int(answer["samples"]), int(answer["checkpoint-crc"]),
                                str(answer["model-sha256"]))
            except (KeyError, TypeError, ValueError) as exc:
                server.left_out(node, f"a malformed answer ({type(exc).__name__}: {exc})",
                                device)
                continue
            server.receive(node, update, device)
        for node in set(nodes) - set(replies):
            held.pop(node, None)
            server.left_out(node, f"no answer within the {cfg['deadline']} s deadline")
        print("fleet: " + _describe(server.finish()), flush=True)


@client_app.train()
def train(message: Message, context: Context) -> Message:
    """One round on this SuperNode's device; an error is answered in one line, not raised,
    so the server can say why the device was left out."""
    node = context.node_config
    instruction = dict(message.content["instruction"])
    device = Path(str(node.get("image", ""))).stem
    try:
        client = DeviceClient(
            lambda: open_device(str(node.get("port", "")) or None,
                                Path(str(node["native"])) if node.get("native") else None,
                                Path(str(node["qemu"])) if node.get("qemu") else None,
                                baud=int(node.get("baud", DEFAULT_BAUD))),
            Path(str(node["image"])), Path(str(node["build"])), Path(str(node["state"])),
            log=lambda text: print(text, flush=True))
        update = client.train(instruction)
        answer = {"kind": update.kind, "payload": update.payload, "samples": update.samples,
                  "checkpoint-crc": update.checkpoint_crc,
                  "model-sha256": update.model_sha256, "holds": client.holds() or "",
                  "device": device}
    except (UserError, DataError, LinkError, KeyError) as exc:
        answer = {"error": f"{type(exc).__name__}: {exc}", "device": device}
    return Message(RecordDict({"answer": ConfigRecord(answer)}), reply_to=message)
