"""Fleet benchmark (issue 18, not a test): what a device uploads per round, and whether a
fleet of devices with differently corrupted data learns more than one device.

1. Upload per device and round against the trainable bytes (what FedAvg of full parameters
   uploads): the compressed scalars of K steps and the compressed int8 delta, measured on
   one native device per model, for several K; the crossover K where the delta gets
   smaller; the MCUNet-class fixture at K = 20.
2. The experiment: the digits CNN, D devices, each holding a disjoint share of the adapt
   split under its own corruption (docs/experiment.md's families x severities); R rounds
   of K local steps on native devices (the fleet's own FleetServer / DeviceClient, in one
   process: Flower only moves the same messages); test accuracy of the averaged model per
   round on every device's corrupted test images, against one device that holds all the
   data and trains the same R K steps alone, and against devices training alone on their
   own share (both in the simulator, bit-identical to the device); several seeds.

    .venv/bin/python benchmarks/fleet.py            # prints the tables
    .venv/bin/python benchmarks/fleet.py --write    # also updates docs/fleet.md and the plot

Runtime (2 shared cores): about 10 minutes.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import sys
import tempfile
import zlib
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from doc_sections import replace_section  # noqa: E402
from zocodegen.cli import main as zocodegen  # noqa: E402
from zocodegen.datasets import fleet_shares  # noqa: E402
from zocodegen.frontends import load_model  # noqa: E402
from zocodegen.host.fleet.client import DeviceClient  # noqa: E402
from zocodegen.host.fleet.server import FleetServer  # noqa: E402
from zocodegen.host.fleet.updates import LEVEL, FleetModel, make_update, pack_scalars  # noqa: E402,E501
from zocodegen.formats.image import pack_image  # noqa: E402
from zocodegen.host.devices import open_device  # noqa: E402
from zocodegen.training import replay, simulator  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures"
SHARED = REPO.parent / "shared" / "models"
DOC = REPO / "docs" / "fleet.md"
PLOT = REPO / "docs" / "fleet_digits.png"
MARKS = {"upload": ("<!-- fleet-upload:start -->", "<!-- fleet-upload:end -->"),
         "experiment": ("<!-- fleet-experiment:start -->", "<!-- fleet-experiment:end -->")}
#: (model, queries, K values): uploads measured for a full WP run (digits: a device's share
#: of the corrupted digits; the others: random data, which has no real loss landscape)
#: (model, estimator, queries, K values); split: block 2 = the last layer, P_s = 2
UPLOAD_MODELS = [(FIXTURES / "digits_cnn.tflite", "wp", 4, (1, 2, 5, 10, 20, 50)),
                 (FIXTURES / "digits_cnn.tflite", "split", 2, (20, 50)),
                 (SHARED / "kws_ref_model.tflite", "wp", 2, (1, 2, 5, 10, 20, 50)),
                 (SHARED / "kws_ref_model.tflite", "split", 2, (20, 50)),
                 (FIXTURES / "mcunet_in1.tflite", "wp", 2, (20,)),
                 (FIXTURES / "mcunet_in1.tflite", "split", 2, (20,))]
DIGITS = FIXTURES / "digits_cnn.tflite"
DEVICES, ROUNDS, K, QUERIES, LR = 6, 10, 20, 20, 0.01
SEEDS = (1, 2, 3)


def build(model: Path, out: Path, queries: int, seed: int = 1, lr: float = LR,
          estimator: str = "wp") -> Path:
    args = ["build", str(model), "--target", "native", "--train", "full", "--estimator", estimator,
            "--record-scalars", "--no-guard", "--lr", str(lr), "--queries", str(queries),
            "--schedule", "constant", "--seed", str(seed), "-o", str(out)]
    if zocodegen(args) != 0:
        raise SystemExit(f"building {model.name} failed")
    return out


def _client(project: Path, image: Path, state: Path) -> DeviceClient:
    return DeviceClient(lambda: open_device(native=project), image, project, state,
                        log=lambda text: None)


def upload_sizes(tmp: Path, names: list[str]) -> list[dict]:
    """The upload rows of UPLOAD_MODELS (of those whose file name contains one of ``names``,
    if any are given)."""
    rows = []
    for model_path, estimator, queries, ks in UPLOAD_MODELS:
        if names and not any(n in model_path.name for n in names):
            continue
        if not model_path.is_file():
            print(f"skipping {model_path.name}: not found (../shared is absent)",
                  file=sys.stderr)
            continue
        name = f"{model_path.stem}-{estimator}"
        project = build(model_path, tmp / f"{name}-build", queries, estimator=estimator)
        model = FleetModel.load(model_path, project)
        graph, rng = model.graph, np.random.default_rng(0)
        t = graph.tensor(graph.inputs[0])
        if model_path == DIGITS:  # real data where there is some: a device's share
            x, y = (device_data(1)[0][key][:16] for key in ("x", "y"))
        else:
            x = rng.integers(-128, 128, size=(16,) + tuple(t.shape[1:])).astype(t.dtype)
            y = rng.integers(0, model.plan.num_classes, 16)
        image = tmp / f"{name}.img"
        pack_image(image, x, y, num_classes=model.plan.num_classes, checkpoint_bytes=4 << 20)
        for k in ks:
            server = FleetServer(model, tmp / f"{name}-k{k}", k, rounds=1)
            client = _client(project, image, tmp / f"{name}-state-k{k}")
            message = server.instruction(0)
            client.train(message)
            run = client.state / "round-0000"
            end, scalars = (run / "checkpoint.bin").read_bytes(), replay.read(run / "scalars.bin")
            delta = make_update(message["checkpoint"], end, None, 16)
            both = make_update(message["checkpoint"], end, scalars, 16)
            scalar_bytes = len(zlib.compress(pack_scalars(scalars, range(k),
                                                          model.plan.scalar_layout), LEVEL))
            per_step = sum(count for _, count in model.plan.scalar_layout)
            rows.append({"model": model_path.name, "estimator": estimator,
                         "layers": len(model.plan.layers), "queries": queries,
                         "per_step": per_step, "k": k, "trainable": model.trainable_bytes,
                         "raw_scalars": 4 * per_step * k,
                         "scalars": scalar_bytes, "delta": len(delta.payload),
                         "sent": len(both.payload), "kind": both.kind})
            print(rows[-1], flush=True)
    return rows


# ---- the experiment -----------------------------------------------------------------------
def device_data(count: int) -> list[dict[str, np.ndarray]]:
    graph = load_model(DIGITS)
    return fleet_shares(count, graph.tensor(graph.inputs[0]).quant)


def _alone(model: FleetModel, x, y, seed: int, checkpoints: list[int], x_test, y_test
           ) -> list[float]:
    """Test accuracy of one device training alone (simulator), at each step in
    ``checkpoints``."""
    plan = dataclasses.replace(model.plan, run_seed=seed)
    params, out = simulator.initial_params(model.graph, plan), []
    for t in range(max(checkpoints) + 1):
        if t in checkpoints:
            out.append(float((simulator.predict(model.graph, params, x_test) == y_test).mean()))
        if t < max(checkpoints):
            idx = simulator.batch_indices(t, plan.config.batch, len(x))
            params, _ = simulator.train_step(model.graph, plan, params, t, x[idx], y[idx])
    return out


def experiment(tmp: Path) -> dict:
    data = device_data(DEVICES)
    x_test = np.concatenate([d["x_test"] for d in data])
    y_test = np.concatenate([d["y_test"] for d in data])
    x_all = np.concatenate([d["x"] for d in data])
    y_all = np.concatenate([d["y"] for d in data])
    order = np.random.default_rng(0).permutation(len(y_all))  # one device's mixed data
    x_all, y_all = x_all[order], y_all[order]
    steps = [r * K for r in range(ROUNDS + 1)]
    results = {"fleet": [], "alone_all": [], "alone_own": [], "bytes": []}
    for seed in SEEDS:
        project = build(DIGITS, tmp / f"digits-seed{seed}", QUERIES, seed)
        model = FleetModel.load(DIGITS, project)
        images = []
        for k, d in enumerate(data):
            images.append(tmp / f"seed{seed}-device{k}.img")
            pack_image(images[-1], d["x"], d["y"], num_classes=10, checkpoint_bytes=1 << 16)
        clients = [_client(project, img, tmp / f"seed{seed}-state{k}")
                   for k, img in enumerate(images)]
        server = FleetServer(model, tmp / f"seed{seed}-out", K, ROUNDS, (x_test, y_test))
        curve = [server.accuracy_before()]
        for _ in range(ROUNDS):
            server.begin()
            for node, client in enumerate(clients):
                server.receive(node, client.train(server.instruction(node, client.holds())),
                               data[node]["name"])
            entry = server.finish()
            curve.append(entry["accuracy"])
            results["bytes"].append({k: entry[k] for k in (
                "round", "upload_bytes", "download_bytes", "fedavg_upload_bytes",
                "fedavg_download_bytes")})
            print(f"seed {seed} round {entry['round']}: {100 * entry['accuracy']:.1f}% "
                  f"({entry['upload_bytes']} B up)", flush=True)
        results["fleet"].append(curve)
        results["alone_all"].append(_alone(model, x_all, y_all, seed, steps, x_test, y_test))
        own = [_alone(model, d["x"], d["y"], seed, steps, x_test, y_test) for d in data]
        results["alone_own"].append(list(np.mean(own, axis=0)))
    results["devices"] = [d["name"] for d in data]
    results["records"] = [len(d["y"]) for d in data]
    results["test"] = len(y_test)
    return results


# ---- reporting ----------------------------------------------------------------------------
def upload_table(rows: list[dict]) -> str:
    lines = ["| model | estimator | scalars per step | K | trainable bytes | "
             "scalars (raw -> varint + zlib) | int8 delta (zlib) | sent | sent / trainable |",
             "|---|---|---:|---:|---:|---:|---:|---|---:|"]
    for r in rows:
        how = (f"WP, {r['layers']} layers x Q = {r['queries']}" if r["estimator"] == "wp"
               else f"split, P_1 = {r['queries']}, P_2 = {r['per_step'] - r['queries']}")
        lines.append(f"| {r['model']} | {how} | {r['per_step']} | {r['k']} | "
                     f"{r['trainable']:,} | {r['raw_scalars']:,} -> {r['scalars']:,} | "
                     f"{r['delta']:,} | {r['kind']} | "
                     f"{100 * r['sent'] / r['trainable']:.2f} % |")
    crossings = []
    for name in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == name and r["estimator"] == "wp"]
        first = next((r["k"] for r in mine if r["delta"] < r["scalars"]), None)
        if len(mine) > 1:
            crossings.append(f"{name} (WP): " + (f"the delta is smaller from K = {first}" if first
                                            else f"scalars stay smaller up to K = {mine[-1]['k']}"))
    return "\n".join(lines) + ("\n\nCrossover: " + "; ".join(crossings) + "." if crossings else "")


def experiment_table(res: dict) -> str:
    fleet, alone_all, alone_own = (np.array(res[k]) * 100 for k in ("fleet", "alone_all",
                                                                    "alone_own"))
    lines = ["| round (steps per device) | fleet of 6, averaged | one device, all the data | "
             "devices alone, own share (mean) |", "|---:|---:|---:|---:|"]
    for r in range(fleet.shape[1]):
        def cell(a):
            return f"{a[:, r].mean():.1f} % (± {a[:, r].std():.1f})"
        lines.append(f"| {r} ({r * K}) | {cell(fleet)} | {cell(alone_all)} | {cell(alone_own)} |")

    def mean(key, rounds):
        return round(np.mean([b[key] for b in res["bytes"] if rounds(b["round"])]))
    b = res["bytes"][0]
    lines.append("")
    every = mean("upload_bytes", lambda r: True)
    lines.append(f"Per round, all {DEVICES} devices together: {every:,} B up on average"
                 f" (FedAvg of full parameters: {b['fedavg_upload_bytes']:,} B);"
                 f" down {mean('download_bytes', lambda r: r == 0):,} B in round 0 (whole "
                 f"checkpoints), then {mean('download_bytes', bool):,} B on average (deltas "
                 f"from the last round's model; FedAvg: {b['fedavg_download_bytes']:,} B)."
                 f" Devices: {', '.join(res['devices'])} ({', '.join(map(str, res['records']))}"
                 f" training records); test: {res['test']} images, every device's corruption;"
                 f" seeds {', '.join(map(str, SEEDS))} (mean ± std).")
    return "\n".join(lines)


def plot(res: dict) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.4, 4))
    rounds = np.arange(len(res["fleet"][0]))
    for key, label in (("fleet", f"fleet of {DEVICES} (FedAvg of replayed models)"),
                       ("alone_all", "one device holding all the data"),
                       ("alone_own", "devices alone on their own share (mean)")):
        a = np.array(res[key]) * 100
        ax.errorbar(rounds, a.mean(axis=0), yerr=a.std(axis=0), label=label, capsize=3)
    ax.set_xlabel(f"round ({K} local steps each)")
    ax.set_ylabel("test accuracy, every device's corruption (%)")
    ax.set_title("digits CNN, non-IID corruptions, WP + replay")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(PLOT, dpi=110)


def publish(key: str, text: str) -> None:
    stamp = f"_Measured {datetime.date.today().isoformat()} by `benchmarks/fleet.py`._\n\n"
    replace_section(DOC, *MARKS[key], stamp + text)


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="update docs/fleet.md")
    parser.add_argument("--only", choices=("upload", "experiment"))
    parser.add_argument("--model", metavar="NAME", action="append", default=[],
                        help="upload rows only for the models whose file name contains NAME "
                             "(repeatable; a smoke test, never written)")
    args = parser.parse_args()
    if args.write and args.model:
        parser.error("--model measures part of the upload table: it never goes into the doc")
    return args


if __name__ == "__main__":
    args = parse_arguments()
    with tempfile.TemporaryDirectory() as tmp:
        if args.only in (None, "upload"):
            table = upload_table(upload_sizes(Path(tmp), args.model))
            print(table)
            if args.write:
                publish("upload", table)
        if args.only in (None, "experiment"):
            res = experiment(Path(tmp))
            table = experiment_table(res)
            print(table)
            if args.write:
                publish("experiment", table)
                plot(res)
