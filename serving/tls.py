"""TLS for the server and its clients. The server takes TF Serving's `--ssl_config_file`: an `SSLConfig` text proto
(tensorflow_serving/config/ssl_config.proto) holding the PEM text of `server_key` and `server_cert`, the
`custom_ca` that signs client certificates and `client_verify` (mutual TLS: a client without a certificate that
`custom_ca` signed is refused). Both APIs, gRPC and REST, use it. A client trusts a CA file and, for mutual TLS,
presents a certificate and key (`ClientTls`)."""

from __future__ import annotations

import os
import ssl
import tempfile
from dataclasses import dataclass
from functools import cache

SSL_CONFIG_FIELDS = ("server_key", "server_cert", "custom_ca", "client_verify")


class TlsConfigError(ValueError):
    """An SSL config file or client certificate file that cannot be used; the message is one line."""


@cache
def _ssl_config_class():
    """tensorflow.serving.SSLConfig (the tensorflow-serving-api wheel ships no module for it), in a pool of its own."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    file = descriptor_pb2.FileDescriptorProto(
        name="tensorflow_serving/config/ssl_config.proto", package="tensorflow.serving", syntax="proto3"
    )
    message = file.message_type.add(name="SSLConfig")
    for number, name in enumerate(SSL_CONFIG_FIELDS, start=1):
        kind = descriptor_pb2.FieldDescriptorProto.TYPE_BOOL if name == "client_verify" else None
        message.field.add(
            name=name,
            number=number,
            label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
            type=kind or descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
        )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.serving.SSLConfig"))


@dataclass(frozen=True)
class SslConfig:
    """TF Serving's SSLConfig: PEM text of the server's key and certificate, the CA of client certificates, and
    whether a client must present one."""

    server_key: str
    server_cert: str
    custom_ca: str = ""
    client_verify: bool = False


def read_ssl_config(path: str) -> SslConfig:
    """The SSLConfig text proto at `path`; TlsConfigError (one line) when it is unreadable, lacks the key or the
    certificate, holds a key and certificate that do not match, or asks for client_verify without custom_ca."""
    from google.protobuf import text_format

    where = f"--ssl-config-file {path}"
    try:
        with open(path) as f:
            proto = text_format.Parse(f.read(), _ssl_config_class()())
    except OSError as e:
        raise TlsConfigError(f"{where}: {e.strerror}") from None
    except text_format.ParseError as e:
        raise TlsConfigError(
            f"{where}: {str(e).splitlines()[0]} (an SSLConfig text proto takes {', '.join(SSL_CONFIG_FIELDS)})"
        ) from None
    if not proto.server_key or not proto.server_cert:
        raise TlsConfigError(f"{where}: give the PEM text of both server_key and server_cert")
    if proto.client_verify and not proto.custom_ca:
        raise TlsConfigError(f"{where}: client_verify needs custom_ca, the PEM text of the CA that signs clients")
    config = SslConfig(proto.server_key, proto.server_cert, proto.custom_ca, proto.client_verify)
    try:
        server_context(config)
    except TlsConfigError as e:
        raise TlsConfigError(f"{where}: {e}") from None
    return config


def grpc_credentials(config: SslConfig):
    """gRPC server credentials as TF Serving builds them: the key pair, custom_ca as the client roots, and a client
    certificate required and verified when client_verify."""
    import grpc

    return grpc.ssl_server_credentials(
        [(config.server_key.encode(), config.server_cert.encode())],
        root_certificates=config.custom_ca.encode() or None,
        require_client_auth=config.client_verify,
    )


def server_context(config: SslConfig) -> ssl.SSLContext:
    """The REST server's TLS context with the same rules as `grpc_credentials`. The key and certificate pass through
    a private temporary folder (Python's ssl loads them from files only), removed once loaded."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.TemporaryDirectory(prefix="tfpipe-tls-") as folder:  # mode 0700
        key, cert = os.path.join(folder, "key.pem"), os.path.join(folder, "cert.pem")
        for path, text in ((key, config.server_key), (cert, config.server_cert)):
            with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                f.write(text)
        try:
            context.load_cert_chain(cert, key)
        except ssl.SSLError as e:
            raise TlsConfigError(f"server_cert and server_key do not make a key pair ({e.reason})") from None
    if config.custom_ca:
        try:
            context.load_verify_locations(cadata=config.custom_ca)
        except ssl.SSLError:
            raise TlsConfigError("custom_ca holds no PEM certificate") from None
    if config.client_verify:
        context.verify_mode = ssl.CERT_REQUIRED
    return context


@dataclass(frozen=True)
class ClientTls:
    """How a client reaches a server over TLS: the CA file that signs the server's certificate (empty: the system's
    CAs) and, for a server with client_verify, a PEM file with the client's certificate and private key."""

    ca_file: str = ""
    cert_file: str = ""

    def requests_options(self) -> dict:
        """`verify` and `cert` for a requests call."""
        return {"verify": self.ca_file or True, "cert": self.cert_file or None}

    def grpc_credentials(self):
        """gRPC channel credentials: the CA as roots, the certificate and key when given."""
        import grpc

        roots = _read(self.ca_file, "CA file") if self.ca_file else None
        key = cert = None
        if self.cert_file:
            text = _read(self.cert_file, "client certificate file").decode()
            key, cert = _pem_blocks(text, "PRIVATE KEY"), _pem_blocks(text, "CERTIFICATE")
            if not key or not cert:
                raise TlsConfigError(
                    f"client certificate file {self.cert_file}: give the certificate and its private key in one PEM file"
                )
        return grpc.ssl_channel_credentials(roots, key, cert)


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise TlsConfigError(f"{what} {path}: {e.strerror}") from None


def _pem_blocks(text: str, kind: str) -> bytes | None:
    """The PEM blocks whose label ends with `kind` (`PRIVATE KEY` matches RSA, EC and PKCS#8 keys), in order."""
    import re

    blocks = [m.group(0) for m in re.finditer(rf"-----BEGIN ([A-Z ]*{kind})-----.*?-----END \1-----", text, re.S)]
    return "\n".join(blocks).encode() + b"\n" if blocks else None


DEFAULT_CLIENT_TLS = ClientTls()  # an https server is checked against the system's CAs; no client certificate
