"""A Kafka-protocol broker reachable over TLS only: the embedded broker (Tansu, plain
text) on a private loopback port, advertising the port of a TLS-terminating proxy in
front of it, with a throwaway self-signed certificate for 127.0.0.1 made by
`openssl`.  A client must speak TLS and trust the certificate (`--security-protocol
SSL --ssl-cafile CERT`) to get anywhere; a plain-text one gets no answer."""

from __future__ import annotations

import contextlib
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from streamdedup.kafka.broker import EmbeddedBroker, free_port
from tests.support.sockets import pipe


def unavailable() -> str | None:
    return None if shutil.which("openssl") else "openssl (the command) is not installed"


def certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for IP 127.0.0.1 and its key."""
    cert, key = directory / "broker.pem", directory / "broker.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


class TlsProxy:
    """TLS on `port`, plain text to `target`, one pair of threads per connection."""

    def __init__(self, target: int, cert: Path, key: Path) -> None:
        self.port, self.target = free_port(), target
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(cert, key)
        self.server = socket.create_server(("127.0.0.1", self.port))
        self.server.settimeout(0.2)
        self.handshakes = 0  # connections that completed a TLS handshake
        # connections that did not (plain text, an untrusting client, or a bare TCP
        # connect: the commands' wait for a broker to listen)
        self.refused = 0
        self.closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            client.settimeout(10)
            tls = self.context.wrap_socket(client, server_side=True)
            tls.settimeout(None)
        except (OSError, ssl.SSLError):
            self.refused += 1
            client.close()
            return
        self.handshakes += 1
        upstream = socket.create_connection(("127.0.0.1", self.target))
        threading.Thread(target=pipe, args=(upstream, tls), daemon=True).start()
        pipe(tls, upstream)

    def close(self) -> None:
        self.closed.set()
        self.server.close()


@dataclass
class TlsBroker:
    bootstrap: str
    cafile: Path
    proxy: TlsProxy

    def flags(self) -> list[str]:
        return ["--security-protocol", "SSL", "--ssl-cafile", str(self.cafile)]

    def env(self) -> dict[str, str]:
        return {
            "STREAMDEDUP_SECURITY_PROTOCOL": "SSL",
            "STREAMDEDUP_SSL_CAFILE": str(self.cafile),
        }

    def client(self) -> dict[str, object]:
        """kafka-python settings for a client of this broker."""
        return {
            "bootstrap_servers": self.bootstrap,
            "security_protocol": "SSL",
            "ssl_cafile": str(self.cafile),
        }


@contextlib.contextmanager
def tls_broker(directory: Path) -> Iterator[TlsBroker]:
    cert, key = certificate(directory)
    real = free_port()
    proxy = TlsProxy(real, cert, key)
    broker = EmbeddedBroker(port=real, advertised_port=proxy.port)
    try:
        yield TlsBroker(broker.start(), cert, proxy)
    finally:
        broker.stop()
        proxy.close()
