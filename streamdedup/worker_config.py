"""The Kafka worker's settings (`WorkerConfig`, frozen like every other
configuration) and the option parsing every command that talks to Kafka shares:
pass-through KEY=VALUE pairs, the connection's security settings, the refusal of
connection options a run would not read.  Plain parsing, apart from config.py's
index and engine settings, and below the kafka package (which must not be imported
by a file-mode run); `streamdedup.kafka.settings` re-exports them for the clients."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from streamdedup.config import Fields
from streamdedup.errors import ConfigError


@dataclass(frozen=True)
class WorkerConfig:
    bootstrap_servers: str
    input_topic: str
    output_topic: str
    dead_letter_topic: str | None
    group_id: str
    input_format: str = "json"
    output_format: str = "json"
    fields: Fields = field(default_factory=Fields)
    max_poll_records: int = 5000  # each batch pays two transactions: amortise them
    poll_timeout_ms: int = 500
    transactional_id: str | None = None
    client_id: str = "streamdedup"
    consumer_options: dict[str, Any] = field(default_factory=dict)
    producer_options: dict[str, Any] = field(default_factory=dict)
    connect_timeout_s: float = 60.0
    idle_exit_s: float | None = None  # stop after this long without messages (demo, tests)
    changelog_topic: str | None = None
    keep_topic: str | None = None  # each unique document's message, as it came
    transaction_timeout_s: float = 60.0
    # Kafka transactions failed in a row (the same batch, redelivered each time): after
    # this many /healthz answers 503; after `stop_after_failures` the worker exits (7)
    unhealthy_after_failures: int = 5
    stop_after_failures: int = 50

    @classmethod
    def from_options(cls, values: dict[str, Any], **overrides: Any) -> WorkerConfig:
        """The configuration `worker` and `replay` build from their option values."""
        require_bootstrap(values)
        settings = connection_settings(values)
        fields: dict[str, Any] = {
            "bootstrap_servers": values["bootstrap_servers"],
            "input_topic": values["input_topic"],
            "output_topic": values.get("output_topic") or "",
            "dead_letter_topic": values["dead_letter_topic"],
            "group_id": values["group_id"],
            "input_format": values["input_format"],
            "output_format": values["output_format"],
            "fields": Fields.from_options(values),
            "max_poll_records": values["max_poll_records"],
            "transactional_id": values["transactional_id"],
            "client_id": values["client_id"],
            "consumer_options": {
                **settings,
                **parse_pairs(values["consumer_option"], "--consumer-option"),
            },
            "producer_options": {
                **settings,
                **parse_pairs(values["producer_option"], "--producer-option"),
            },
            "connect_timeout_s": values["connect_timeout"],
            "transaction_timeout_s": values["transaction_timeout"],
            "idle_exit_s": values.get("idle_exit"),
            "changelog_topic": values.get("changelog_topic"),
            "keep_topic": values.get("keep_topic"),
        }
        return cls(**{**fields, **overrides})


def require_bootstrap(values: dict[str, Any]) -> None:
    if not values.get("bootstrap_servers"):
        raise ConfigError("--bootstrap-servers is required (or STREAMDEDUP_BOOTSTRAP_SERVERS)")


def _option_value(text: str) -> Any:
    """KEY=VALUE pass-through values: int, float, true/false, else the string."""
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text


def parse_pairs(items: list[str] | None, flag: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{flag} expects KEY=VALUE, got {item!r}")
        out[key.strip()] = _option_value(value.strip())
    return out


# The connection (security) options every command that talks to Kafka takes, as
# option dests; `connection_settings` turns them into kafka-python settings.
CONNECTION_OPTIONS = (
    "security_protocol",
    "sasl_mechanism",
    "sasl_username",
    "sasl_password",
    "ssl_cafile",
    "ssl_certfile",
    "ssl_keyfile",
)
_SASL = ("sasl_mechanism", "sasl_username", "sasl_password")
_SSL = ("ssl_cafile", "ssl_certfile", "ssl_keyfile")


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def check_connection_used(values: dict[str, Any], used: bool, why: str) -> None:
    """A connection option set (command line, environment or config file) for a run
    that will not connect to Kafka is refused: a user who set SASL or TLS for it
    would otherwise believe the traffic protected (or the setting applied) when it
    was never read.  `why` says when the command connects."""
    if used:
        return
    given = [d for d in CONNECTION_OPTIONS if d in values.get("_explicit", ())]
    if given:
        raise ConfigError(
            f"{', '.join(_flag(d) for d in given)} given, but this run does not connect to "
            f"Kafka ({why}): remove {'it' if len(given) == 1 else 'them'} (or the "
            f"STREAMDEDUP_{given[0].upper()} environment variable)"
        )


def connection_settings(values: dict[str, Any]) -> dict[str, Any]:
    """Security settings shared by consumer, producer and admin client.  A setting the
    chosen protocol would not use (SASL options without SASL, certificate files without
    TLS) is refused rather than silently ignored."""
    protocol = values["security_protocol"]
    for names, uses, kind in (
        (_SASL, protocol.startswith("SASL"), "SASL_PLAINTEXT or SASL_SSL"),
        (_SSL, protocol.endswith("SSL"), "SSL or SASL_SSL"),
    ):
        unused = [n for n in names if values.get(n) is not None]
        if unused and not uses:
            raise ConfigError(
                f"{', '.join(_flag(n) for n in unused)} would be ignored with "
                f"--security-protocol {protocol}: set the protocol to {kind}, or remove "
                f"{'it' if len(unused) == 1 else 'them'}"
            )
    out: dict[str, Any] = {"security_protocol": protocol}
    mapping = {
        "sasl_mechanism": "sasl_mechanism",
        "sasl_username": "sasl_plain_username",
        "sasl_password": "sasl_plain_password",
        "ssl_cafile": "ssl_cafile",
        "ssl_certfile": "ssl_certfile",
        "ssl_keyfile": "ssl_keyfile",
    }
    for ours, theirs in mapping.items():
        if values.get(ours) is not None:
            out[theirs] = values[ours]
    if values["security_protocol"].startswith("SASL") and not values.get("sasl_mechanism"):
        raise ConfigError(
            f"--security-protocol {values['security_protocol']} needs --sasl-mechanism"
        )
    return out
