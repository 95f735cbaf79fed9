"""Flower's processes for `zocodegen fleet`, in Flower's own deployment model: a SuperLink
(`fleet serve`), one SuperNode per device (`fleet join`, on the machine the device is
attached to), and `flwr run` of the app in ``app/``; `fleet local` starts all of them on
one machine with emulated devices. Everything Flower writes goes to ``OUT/flower/``
(FLWR_HOME, one log per process), not to the user's ~/.flwr.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from zocodegen.errors import UserError
from zocodegen.files import MissingInput, open_append, read_text, write_atomic
from zocodegen.formats.link import DEFAULT_BAUD
from .security import ServerKeys, enrolled_keys

APP = Path(__file__).with_name("app")
FEDERATION = "zocodegen"
#: flwr's SuperExec polls for new app tasks every second by default
TASK_POLL_SECONDS = "0.1"


def _tool(name: str) -> str:
    """A Flower command of this Python's environment (the venv zocodegen runs in)."""
    path = Path(sys.executable).parent / name
    found = str(path) if path.is_file() else shutil.which(name)
    if not found:
        raise UserError(f"{name} not found: install Flower with `pip install "
                        "'zocodegen[fleet]'` (or run scripts/setup.sh)")
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_for_port(host: str, port: int, proc: subprocess.Popen, what: str, log: Path,
                   seconds: float = 30) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise UserError(f"{what} exited with status {proc.returncode}: see {log}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise UserError(f"{what} did not open {host}:{port} within {seconds:.0f} s: see {log}")


def check_reachable(address: str, seconds: float = 5) -> None:
    """Refuse, in one line, a SuperLink address nothing answers at."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"--superlink expects HOST:PORT, got '{address}'")
    try:
        with socket.create_connection((host, int(port)), timeout=seconds):
            pass
    except OSError as exc:
        raise UserError(f"cannot reach the fleet server at {address} "
                        f"({exc.strerror or exc}): is `zocodegen fleet serve` running there?"
                        ) from None


def check_port_free(host: str, port: int) -> None:
    """Refuse, in one line, a --listen-port that something already listens on: Flower's
    SuperLink would only fail later, its clients saying the SuperLink is unavailable."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind
            probe.bind(address)
            probe.listen()
    except OSError as exc:
        busy = exc.errno == errno.EADDRINUSE
        raise UserError(f"--listen-port {port}: {host}:{port} "
                        + ("is in use by another program (or another `fleet serve`): stop it "
                           "or choose another --listen-port" if busy else
                           f"cannot be listened on ({exc.strerror or exc}): choose another "
                           "--host or --listen-port")) from None


def config_text(values: dict) -> str:
    """Flower's `key=value` config syntax: strings quoted, numbers as they are."""
    return " ".join(f"{k}={json.dumps(v) if isinstance(v, str) else v}"
                    for k, v in values.items())


class Flower:
    """The Flower processes this command started; all are stopped on exit."""

    def __init__(self, home: Path):
        self.home = Path(home)
        self.logs = self.home / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        # Flower starts its own helpers (flower-superexec, flwr-serverapp) by name
        path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        self.env = {**os.environ, "PATH": path, "FLWR_HOME": str(self.home),
                    "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": TASK_POLL_SECONDS}
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> Flower:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _start(self, args: list[str], log_name: str, foreground: bool = False
               ) -> subprocess.Popen:
        log = self.logs / log_name
        out = None if foreground else open_append(log)
        try:
            # own process group: stopping it also stops the helpers Flower started
            proc = subprocess.Popen(args, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=not foreground)
        finally:
            if out is not None:
                out.close()
        self.procs.append(proc)
        return proc

    def superlink(self, host: str, port: int, keys: ServerKeys | None = None) -> str:
        """Starts the SuperLink; returns the address devices and `flwr run` connect to.
        With ``keys``: TLS, and only SuperNodes enrolled with ``enroll`` are let in (their
        enrolment kept in a database beside the logs, so a restarted server keeps it)."""
        security = ["--insecure"] if keys is None else [
            "--ssl-ca-certfile", str(keys.ca.resolve()),
            "--ssl-certfile", str(keys.certificate.resolve()),
            "--ssl-keyfile", str(keys.key.resolve()), "--enable-supernode-auth",
            "--database", str((self.home / "superlink.db").resolve())]
        proc = self._start([_tool("flower-superlink"), *security,
                            "--disable-runtime-dependency-installation",
                            "--host", host, "--port", str(port)], "superlink.log")
        connect = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        _wait_for_port(connect, port, proc, "the Flower SuperLink", self.logs / "superlink.log")
        address = f"{connect}:{port}"
        trust = ("insecure = true" if keys is None
                 else f'root-certificates = "{keys.ca.resolve()}"')
        write_atomic(self.home / "config.toml", (
            f'[superlink]\ndefault = "{FEDERATION}"\n\n[superlink.{FEDERATION}]\n'
            f'address = "{address}"\n{trust}\n').encode())
        return address

    def enroll(self, public_key: Path) -> bool:
        """Lets the device holding ``public_key``'s private half join (`flwr supernode
        register`); False when it already was."""
        done = subprocess.run([_tool("flwr"), "supernode", "register", str(public_key),
                               FEDERATION], env=self.env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL)
        if done.returncode == 0:
            return True
        if "already in use" in done.stdout + done.stderr:
            return False
        raise UserError(f"enrolling {public_key} failed: "
                        f"{(done.stdout + done.stderr).strip().splitlines()[-1:]}")

    def supernode(self, superlink: str, node: dict, name: str, port: int | None = None,
                  foreground: bool = False, ca: Path | None = None,
                  key: Path | None = None) -> subprocess.Popen:
        """A SuperNode for one device; its ClientApp's output goes to logs/NAME.log. With
        ``ca`` (the fleet's CA certificate) over TLS, authenticated with ``key``."""
        security = ["--insecure"] if ca is None else [
            "--root-certificates", str(ca.resolve()),
            "--auth-supernode-private-key", str(key.resolve())]
        return self._start([_tool("flower-supernode"), *security, "--superlink", superlink,
                            "--port", str(port or free_port()),
                            "--node-config", config_text(node)], f"{name}.log", foreground)

    def run(self, run_config: dict) -> None:
        """`flwr run` of the app against the SuperLink, its log streamed to stdout."""
        subprocess.run([_tool("flwr"), "run", str(APP), FEDERATION, "--stream",
                        "--run-config", config_text(run_config)], env=self.env,
                       stdin=subprocess.DEVNULL, check=False)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            kill_group(proc, signal.SIGKILL)  # what it left behind (ClientApps, firmware)
        self.procs.clear()


#: What a SuperNode's log says when the SuperLink turns it away, and the line for a person.
REFUSALS = (
    (("No SuperNode found with the given public key", "[code: 2004]"),
     "the fleet server refused this device: its key {key} is not enrolled there (the "
     "server's operator puts it in the folder of `fleet serve --devices DIR`)"),
    (("[code: 2001]", "must be registered"),
     "the fleet server admits only enrolled devices and this one sent no key: join without "
     "--insecure"),
    (("CERTIFICATE_VERIFY_FAILED", "SSL/TLS handshake"),
     "the fleet server's TLS certificate does not verify with --ca {ca}: give the server's "
     "OUT/keys/ca.crt, and an address its certificate names (`fleet serve --advertise "
     "HOST`)"),
)


def refusal(log: str, key: Path | None, ca: Path | None) -> str | None:
    """The one line that says why the SuperLink refused a SuperNode, from its log."""
    for needles, line in REFUSALS:
        if any(n in log for n in needles):
            return line.format(key=key, ca=ca)
    return None


def enrol_new_keys(flower: Flower, folder: Path, keys: list[Path],
                   every: float = 2.0) -> threading.Event:
    """Enrols ``keys`` now and every ``*.pub`` that appears in ``folder`` later (checked every
    ``every`` seconds), until the returned event is set: a device is admitted by dropping its
    public key into the folder while the fleet runs."""
    seen: set[Path] = set()

    def enrol(paths: list[Path]) -> None:
        for path in paths:
            if path not in seen:
                seen.add(path)
                if flower.enroll(path):
                    print(f"fleet: enrolled the device key {path}", flush=True)

    enrol(keys)
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(every):
            try:
                enrol(enrolled_keys(folder))
            except UserError as exc:
                print(f"fleet: {exc}", flush=True)

    threading.Thread(target=watch, daemon=True).start()
    return stop


def kill_group(proc: subprocess.Popen, sig: int) -> None:
    """Signal the process group a background Flower process leads."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run_config(model: Path, build: Path, out: Path, rounds: int, steps: int,
               min_devices: int, wait: float, deadline: float, test: Path | None) -> dict:
    """The app's run configuration (app/pyproject.toml), with absolute paths: the ServerApp
    runs in Flower's own process and directory."""
    return {"model": str(Path(model).resolve()), "build": str(Path(build).resolve()),
            "out": str(Path(out).resolve()), "test": str(Path(test).resolve()) if test else "",
            "rounds": rounds, "steps-per-round": steps, "min-devices": min_devices,
            "wait": float(wait), "deadline": float(deadline)}


def node_config(image: Path, build: Path, state: Path, port: str | None = None,
                native: Path | None = None, qemu: Path | None = None,
                baud: int = DEFAULT_BAUD) -> dict:
    """A SuperNode's node configuration: its device, data image, build and state."""
    node = {"image": str(Path(image).resolve()), "build": str(Path(build).resolve()),
            "state": str(Path(state).resolve())}
    if port:
        node["port"], node["baud"] = port, baud
    elif native:
        node["native"] = str(Path(native).resolve())
    elif qemu:
        node["qemu"] = str(Path(qemu).resolve())
    return node


def finished_rounds(out: Path) -> int:
    try:
        return len(json.loads(read_text(Path(out) / "fleet.json", "run record"))["rounds"])
    except (MissingInput, ValueError, KeyError):
        return 0
