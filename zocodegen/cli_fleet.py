"""The ``zocodegen fleet`` commands (docs/fleet.md): serve, join and local, over Flower
(host/fleet). Flower is imported only when a fleet command runs, so every other command
starts without it."""
from __future__ import annotations

import argparse
from pathlib import Path

from .cli_options import MIN_DEVICES
from .errors import UserError
from .files import read_input
from .host.devices import open_device


def _fleet_run_config(args: argparse.Namespace, images: list[Path] = ()) -> dict:
    from .host.fleet.launch import run_config
    from .host.fleet.updates import FleetModel
    from .host.fleet.server import FleetServer, test_split
    # refuse a bad model, build, test data, image or output here, in one line, before Flower
    # starts (a device whose image does not fit would only be left out of the rounds)
    model = FleetModel.load(args.model, args.build)
    if args.test is not None and not args.test.is_file():
        raise UserError(f"test data not found: {args.test}")
    test_split(args.test, model)
    for image in images:
        if not image.is_file():
            raise UserError(f"image not found: {image}")
        model.check_image(image)
    FleetServer(model, args.output, args.steps_per_round, args.rounds)
    devices = args.min_devices or (len(images) if images else MIN_DEVICES)
    return run_config(args.model, args.build, args.output, args.rounds, args.steps_per_round,
                      devices, args.wait, args.deadline, args.test)


def _fleet_result(args: argparse.Namespace, flower_home: Path) -> None:
    from .host.fleet.launch import finished_rounds
    done = finished_rounds(args.output)
    if done < args.rounds:
        raise UserError(f"the fleet stopped after {done} of {args.rounds} rounds: see the "
                        f"server's output above and the logs in {flower_home / 'logs'}")
    print(f"{args.output}: {done} rounds; the averaged model is {args.output / 'model.bin'} "
          f"(`zocodegen export {args.model} {args.output / 'model.bin'} -o OUT` writes it "
          "into the model file)")


def cmd_fleet_serve(args: argparse.Namespace) -> None:
    from .host.fleet import security
    from .host.fleet.launch import Flower, check_port_free, enrol_new_keys
    check_port_free(args.host, args.listen_port)
    config = _fleet_run_config(args)
    secure = _fleet_secure(args, args.host)
    devices = security.enrolled_keys(args.devices) if secure else []
    if secure and args.devices is None:
        raise UserError(f"`fleet serve` on {args.host} admits only enrolled devices: give "
                        "their public keys with --devices DIR (each device's "
                        "STATE/keys/device.pub, made by its first `fleet join`), or "
                        "--insecure to let anyone who reaches the port join")
    home = args.output / "flower"
    keys = (security.server_keys(args.output / "keys",
                                 security.server_names(args.host, tuple(args.advertise)))
            if secure else None)
    with Flower(home) as flower:
        flower.superlink(args.host, args.listen_port, keys)
        trust = "TLS, enrolled devices only" if secure else "no TLS, anyone may join"
        how = (f"--ca {keys.ca}" if secure else "--insecure")
        print(f"fleet: SuperLink listening on {args.host}:{args.listen_port} ({trust}); "
              f"connect devices with `zocodegen fleet join --superlink "
              f"THIS_HOST:{args.listen_port} {how} ...`", flush=True)
        stop = enrol_new_keys(flower, args.devices, devices) if secure else None
        try:
            flower.run(config)
        finally:
            if stop is not None:
                stop.set()
    _fleet_result(args, home)


def _fleet_secure(args: argparse.Namespace, host: str) -> bool:
    """TLS and enrolled devices: on by default whenever the other end is not this machine."""
    from .host.fleet.security import beyond_localhost
    return not args.insecure and (beyond_localhost(host) or args.secure)


def cmd_fleet_join(args: argparse.Namespace) -> None:
    from .host.fleet import security
    from .host.fleet.client import DeviceClient
    from .host.fleet.launch import Flower, check_reachable, node_config, refusal
    check_reachable(args.superlink)
    host = args.superlink.rpartition(":")[0]
    secure = _fleet_secure(args, host) or args.ca is not None
    if secure and args.ca is None:
        raise UserError(f"the fleet server at {args.superlink} is reached over TLS: give its "
                        "CA certificate with --ca FILE (the server's OUT/keys/ca.crt), or "
                        "--insecure for a server started with --insecure")
    if args.ca is not None and not args.ca.is_file():
        raise UserError(f"--ca {args.ca}: file not found")
    DeviceClient(lambda: open_device(args.port, args.native, args.qemu, baud=args.baud),
                 args.image, args.build, args.state)  # refuse a bad image or build now
    key, public = security.device_key(args.state / "keys") if secure else (None, None)
    node = node_config(args.image, args.build, args.state, args.port, args.native, args.qemu,
                       baud=args.baud)
    with Flower(args.state / "flower") as flower:
        print(f"fleet: joining {args.superlink}"
              + (f" as the device whose public key is {public}" if secure else "")
              + f" (Ctrl-C to leave; its log: {flower.logs / 'device.log'})", flush=True)
        status = flower.supernode(args.superlink, node, "device", ca=args.ca if secure else None,
                                  key=key).wait()
        log = flower.logs / "device.log"
        text = read_input(log, "log").decode(errors="replace") if log.is_file() else ""
        why = refusal(text, public, args.ca)
    if why is not None:
        raise UserError(why)
    if status != 0:  # e.g. the endpoint answers but is no Flower SuperLink
        raise UserError(f"the Flower SuperNode left {args.superlink} with status {status}: is "
                        f"a `zocodegen fleet serve` SuperLink listening there? (its log: {log})")


def cmd_fleet_local(args: argparse.Namespace) -> None:
    from .host.fleet import security
    from .host.fleet.launch import Flower, free_port, node_config
    if args.min_devices is not None and args.min_devices > len(args.images):
        raise UserError(f"--min-devices {args.min_devices}: fleet local starts one device per "
                        f"--images file ({len(args.images)}), so no round would have "
                        f"{args.min_devices}: give as many images, or --min-devices "
                        f"{len(args.images)}")
    config = _fleet_run_config(args, args.images)
    home = args.output / "flower"
    keys = (security.server_keys(args.output / "keys", security.LOOPBACK)
            if args.secure else None)
    with Flower(home) as flower:
        address = flower.superlink("127.0.0.1", free_port(), keys)
        for k, image in enumerate(args.images):
            state = args.output / f"device-{k}"
            key = None
            if keys is not None:
                key, public = security.device_key(state / "keys")
                flower.enroll(public)
            flower.supernode(address, node_config(image, args.build, state, native=args.native,
                                                  qemu=args.qemu), f"device-{k}",
                             ca=keys.ca if keys else None, key=key)
        print(f"fleet: {len(args.images)} emulated devices joined {address}"
              + (" over TLS, each enrolled" if keys else "")
              + f"; device logs in {home / 'logs'}", flush=True)
        flower.run(config)
    _fleet_result(args, home)
