"""Certificates made for a test (the `cryptography` package): a CA, a server certificate for 127.0.0.1 and
localhost, a client certificate, each signed by the CA; and TF Serving's SSLConfig file holding them."""

from __future__ import annotations

import datetime
import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _pem_key(key) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def _pem_cert(cert) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _certificate(subject: str, key, issuer_name, issuer_key, ca: bool, usage=None, names=()):
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer_name or x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if usage:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(names)), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


@dataclass(frozen=True)
class Certificates:
    """PEM files: `ca` (the CA's certificate), `server_key`/`server_cert`, `client` (client certificate and key in one
    file), `other_client` (the same from a CA the server does not know)."""

    ca: str
    server_key: str
    server_cert: str
    client: str
    other_client: str

    def ssl_config(self, path: Path, client_verify: bool = False) -> str:
        """TF Serving's SSLConfig text file with the PEM text of the key, certificate and CA."""
        fields = (("server_key", self.server_key), ("server_cert", self.server_cert), ("custom_ca", self.ca))
        text = "".join(f"{field}: {json.dumps(Path(source).read_text())}\n" for field, source in fields)
        path.write_text(text + f"client_verify: {str(client_verify).lower()}\n")
        return str(path)


def make_certificates(folder: Path) -> Certificates:
    folder.mkdir(parents=True, exist_ok=True)

    def write(name: str, text: str) -> str:
        (folder / name).write_text(text)
        return str(folder / name)

    def client(ca_name, ca_key) -> str:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _certificate("tfpipe test client", key, ca_name, ca_key, False, ExtendedKeyUsageOID.CLIENT_AUTH)
        return _pem_cert(cert) + _pem_key(key)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _certificate("tfpipe test CA", ca_key, None, ca_key, True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    names = (x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost"))
    server_cert = _certificate(
        "127.0.0.1", server_key, ca_cert.subject, ca_key, False, ExtendedKeyUsageOID.SERVER_AUTH, names
    )
    other_key = ec.generate_private_key(ec.SECP256R1())
    other_ca = _certificate("another CA", other_key, None, other_key, True)
    return Certificates(
        ca=write("ca.pem", _pem_cert(ca_cert)),
        server_key=write("server.key", _pem_key(server_key)),
        server_cert=write("server.pem", _pem_cert(server_cert)),
        client=write("client.pem", client(ca_cert.subject, ca_key)),
        other_client=write("other-client.pem", client(other_ca.subject, other_key)),
    )
