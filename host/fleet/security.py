"""Who may join a fleet (docs/reliability.md "The fleet's trust model"): TLS on every Flower
link and SuperNode authentication, Flower's own mechanisms (flwr 1.42: the SuperLink's
``--ssl-*`` and ``--enable-supernode-auth``, enrolment with ``flwr supernode register``).

The server's operator holds a private certificate authority (``OUT/keys/ca.key``, made on
the first ``fleet serve``) and the SuperLink's certificate it signs; devices are given the
CA's certificate (``ca.crt``, public) to check that they talk to this server. Each device
holds its own key pair (``STATE/keys/device``, made on its first ``fleet join``); the server
enrols the public half (``--devices DIR`` of ``*.pub`` files), and a SuperNode whose key is
not enrolled is refused by the SuperLink. Keys are EC P-384 (what Flower's node
authentication takes), in OpenSSH format for the node keys and PEM for TLS.
"""
from __future__ import annotations

import datetime
import ipaddress
import socket
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from zocodegen.errors import UserError
from zocodegen.files import read_input, write_atomic

LOOPBACK = ("127.0.0.1", "::1", "localhost")
#: how long the fleet's certificates are valid
VALID_DAYS = 825


@dataclass(frozen=True)
class ServerKeys:
    ca: Path  # the CA certificate devices are given (--ca)
    certificate: Path
    key: Path


def beyond_localhost(host: str) -> bool:
    """True when a SuperLink listening on ``host`` can be reached from other machines."""
    return host not in LOOPBACK


def _private_key(path: Path) -> ec.EllipticCurvePrivateKey:
    if path.is_file():
        return serialization.load_pem_private_key(read_input(path, "key"), None)
    key = ec.generate_private_key(ec.SECP384R1())
    _write_secret(path, key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    return key


def _write_secret(path: Path, data: bytes) -> None:
    write_atomic(path, data, sync=True, permissions=0o600)


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _certificate(subject: str, public_key, issuer: str, signer, ca: bool,
                 names: tuple[str, ...] = ()) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(_name(issuer))
               .public_key(public_key).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None),
                              critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
            encipher_only=False, decipher_only=False), critical=True)
    else:
        builder = (builder.add_extension(x509.SubjectAlternativeName([_san(n) for n in names]),
                                         critical=False)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                                  critical=False))
    return builder.sign(signer, hashes.SHA256())


def _san(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def server_names(host: str, advertise: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The names devices may reach the SuperLink by: loopback (Flower's own helpers connect
    there), this machine's name, the listening address and what ``--advertise`` adds."""
    names = [*LOOPBACK, socket.gethostname(), *advertise]
    if host not in ("0.0.0.0", "::"):
        names.append(host)
    return tuple(dict.fromkeys(names))


def server_keys(folder: Path, names: tuple[str, ...]) -> ServerKeys:
    """The fleet's CA (made once, kept) and a SuperLink certificate for ``names`` (made
    again when a name is new)."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key = _private_key(folder / "ca.key")
    ca_path = folder / "ca.crt"
    if not ca_path.is_file():
        ca = _certificate("zocodegen fleet CA", ca_key.public_key(), "zocodegen fleet CA",
                          ca_key, ca=True)
        write_atomic(ca_path, ca.public_bytes(serialization.Encoding.PEM))
    keys = ServerKeys(ca_path, folder / "server.crt", folder / "server.key")
    if _covers(keys.certificate, names):
        return keys
    server_key = _private_key(keys.key)
    cert = _certificate("zocodegen fleet SuperLink", server_key.public_key(),
                        "zocodegen fleet CA", ca_key, ca=False, names=names)
    write_atomic(keys.certificate, cert.public_bytes(serialization.Encoding.PEM))
    return keys


def _covers(path: Path, names: tuple[str, ...]) -> bool:
    if not path.is_file():
        return False
    cert = x509.load_pem_x509_certificate(read_input(path, "key"))
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    have = {str(v) for v in sans.get_values_for_type(x509.DNSName)} | {
        str(v) for v in sans.get_values_for_type(x509.IPAddress)}
    return set(names) <= have and cert.not_valid_after_utc > datetime.datetime.now(
        datetime.timezone.utc) + datetime.timedelta(days=30)


def device_key(folder: Path) -> tuple[Path, Path]:
    """This device's key pair (private, public ``.pub``), made on first use."""
    private, public = folder / "device", folder / "device.pub"
    if not private.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP384R1())
        _write_secret(private, key.private_bytes(serialization.Encoding.PEM,
                                                 serialization.PrivateFormat.OpenSSH,
                                                 serialization.NoEncryption()))
        write_atomic(public, key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH) + b"\n")
    return private, public


def enrolled_keys(folder: Path | None) -> list[Path]:
    """The public keys of ``--devices DIR`` (every ``*.pub``), each checked to be one."""
    if folder is None:
        return []
    if not folder.is_dir():
        raise UserError(f"--devices {folder}: not a folder of device public keys (*.pub)")
    keys = sorted(folder.glob("*.pub"))
    for path in keys:
        try:
            serialization.load_ssh_public_key(read_input(path, "key"))
        except (ValueError, UnicodeDecodeError):
            raise UserError(f"{path}: not an OpenSSH public key (a device's "
                            "STATE/keys/device.pub)") from None
    return keys
