"""The secure broker (``DRIPSTREAM_KAFKA_SECURE=1 scripts/broker.sh up``): TLS + SCRAM.

A broker of its own (state folder ``.cache/kafka-secure-test``, ports 19192/19193), wiped
and started once for this module, next to the plain one the other tests share.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shlex
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from aiokafka.conn import create_conn
from aiokafka.errors import KafkaConnectionError, SaslAuthenticationFailed

from dripstream.streams.kafka import client_options, consumer, create_topics, producer
from dripstream.streams.settings import StreamSettings
from dripstream.streams.tools import wait_for_outputs
from dripstream.topics.catalog import PAGES, RECORDS
from dripstream.topics.codecs import to_msgpack
from dripstream.topics.records import RawPage

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
BROKER = ["bash", str(ROOT / "scripts" / "broker.sh")]
HOME = ROOT / ".cache" / "kafka-secure-test"
PORT = 19192
CONTROLLER_PORT = 19193
EXTRA_PORT = 19194  # where a smuggled PLAINTEXT listener would open
FAIL_WITHIN_S = 30  # a refused client must give up within this


@pytest.fixture(scope="module")
def secure_env() -> Iterator[dict[str, str]]:
    """Start a fresh secure broker; yields the client settings `up` printed."""
    env = {
        **os.environ,
        "DRIPSTREAM_KAFKA_HOME": str(HOME),
        "DRIPSTREAM_KAFKA_PORT": str(PORT),
        "DRIPSTREAM_KAFKA_CONTROLLER_PORT": str(CONTROLLER_PORT),
        "DRIPSTREAM_KAFKA_SECURE": "1",
    }

    def broker(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*BROKER, command], env=env, capture_output=True, text=True, timeout=300
        )

    # Leftovers of an interrupted run (our own state folder only), then an empty cluster;
    # jars, certificates and passwords are kept.
    broker("down")
    broker("reset")
    started = broker("up")
    if started.returncode != 0:
        pytest.fail(f"the secure broker did not start:\n{started.stdout}{started.stderr}")
    exported = {}
    for line in started.stdout.splitlines():
        words = shlex.split(line)
        if words[:1] == ["export"]:
            name, _, value = words[1].partition("=")
            exported[name] = value
    secrets = [
        (HOME / "secrets" / name).read_text().strip()
        for name in ("client.password", "admin.password")
    ]
    for secret in secrets:
        assert secret not in started.stdout + started.stderr
    try:
        yield exported
    finally:
        broker("down")
    log = (HOME / "logs" / "server.log").read_text(errors="replace")
    for secret in secrets:
        assert secret not in log


@pytest.fixture
def secure_settings(secure_env: dict[str, str]) -> StreamSettings:
    """Client settings from the printed variables, with fresh prefixes (no topics yet)."""
    run = uuid.uuid4().hex[:10]
    return StreamSettings.from_env(
        secure_env, topic_prefix=f"secure-{run}.", group_prefix=f"secure-{run}-", web_port=0
    )


@pytest.fixture
def secure_topics(secure_settings: StreamSettings) -> StreamSettings:
    """``secure_settings`` with the pipeline topics created."""
    asyncio.run(asyncio.wait_for(create_topics(secure_settings), 60))
    return secure_settings


def test_up_prints_the_client_settings(secure_env: dict[str, str]) -> None:
    assert secure_env == {
        "DRIPSTREAM_BROKERS": f"127.0.0.1:{PORT}",
        "DRIPSTREAM_SECURITY_PROTOCOL": "SASL_SSL",
        "DRIPSTREAM_SASL_MECHANISM": "SCRAM-SHA-512",
        "DRIPSTREAM_SASL_USERNAME": "dripstream",
        "DRIPSTREAM_SASL_PASSWORD_FILE": str(HOME / "secrets" / "client.password"),
        "DRIPSTREAM_SSL_CAFILE": str(HOME / "tls" / "ca.crt"),
    }
    password_file = Path(secure_env["DRIPSTREAM_SASL_PASSWORD_FILE"])
    assert password_file.stat().st_mode & 0o777 == 0o600
    assert len(password_file.read_text().strip()) >= 32


async def _round_trip(settings: StreamSettings, value: bytes) -> list[bytes]:
    topic = settings.topic_prefix + PAGES
    sender = producer(settings)
    await sender.start()
    try:
        await sender.send_and_wait(topic, value, key=b"k")
    finally:
        await sender.stop()
    reader = consumer(settings, topic)
    await reader.start()
    try:
        batches = await reader.getmany(timeout_ms=10_000)
    finally:
        await reader.stop()
    return [message.value for messages in batches.values() for message in messages]


def test_right_credentials_create_topics_produce_and_consume(
    secure_settings: StreamSettings,
) -> None:
    outcome = asyncio.run(asyncio.wait_for(create_topics(secure_settings), 60))
    assert outcome and set(outcome.values()) == {"created"}
    # The broker never auto-creates topics: this goes to the topic just created.
    values = asyncio.run(asyncio.wait_for(_round_trip(secure_settings, b"over TLS"), 60))
    assert values == [b"over TLS"]


async def _start_producer(settings: StreamSettings) -> None:
    client = producer(settings, request_timeout_ms=5000)
    try:
        await asyncio.wait_for(client.start(), FAIL_WITHIN_S)
    finally:
        await client.stop()


def test_a_wrong_password_is_refused(
    secure_settings: StreamSettings, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = replace(secure_settings, sasl_password="not-the-password")
    options = client_options(wrong)
    host, port = options.pop("bootstrap_servers")[0].split(":")

    async def connect() -> None:
        conn = await create_conn(host, int(port), **options)
        conn.close()

    # The connection itself fails with the broker's authentication error ...
    with pytest.raises(SaslAuthenticationFailed, match="invalid credentials"):
        asyncio.run(asyncio.wait_for(connect(), FAIL_WITHIN_S))
    # ... which a client reports while giving up on every bootstrap server.
    refused = pytest.raises(KafkaConnectionError, match="Unable to bootstrap")
    with caplog.at_level(logging.ERROR, logger="aiokafka"), refused:
        asyncio.run(_start_producer(wrong))
    assert "SaslAuthenticationFailed" in caplog.text


def test_plaintext_to_the_secure_port_fails_quickly(
    secure_settings: StreamSettings, caplog: pytest.LogCaptureFixture
) -> None:
    plain = replace(secure_settings, security_protocol="PLAINTEXT")
    refused = pytest.raises(KafkaConnectionError, match="Unable to bootstrap")
    with caplog.at_level(logging.ERROR, logger="aiokafka"), refused:
        asyncio.run(_start_producer(plain))
    assert "closed" in caplog.text  # the broker hangs up on a request that is not TLS


def test_tls_without_the_ca_is_refused(
    secure_settings: StreamSettings, caplog: pytest.LogCaptureFixture
) -> None:
    untrusted = replace(secure_settings, ssl_cafile="")  # the system's CAs only
    refused = pytest.raises(KafkaConnectionError)
    with caplog.at_level(logging.ERROR, logger="aiokafka"), refused:
        asyncio.run(_start_producer(untrusted))
    assert "CERTIFICATE_VERIFY_FAILED" in caplog.text


def test_a_worker_turns_a_page_into_a_record_over_the_secure_connection(
    secure_env: dict[str, str], secure_topics: StreamSettings, tmp_path: Path
) -> None:
    secure_settings = secure_topics
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DRIPSTREAM_")},
        **secure_env,
        "DRIPSTREAM_TOPIC_PREFIX": secure_settings.topic_prefix,
        "DRIPSTREAM_GROUP_PREFIX": secure_settings.group_prefix,
        "DRIPSTREAM_WEB_PORT": "0",
        "DRIPSTREAM_DATA_DIR": str(tmp_path / "data"),
    }
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "dripstream.streams.cli", "worker"],
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
    try:
        url = "https://secure.example/page"
        page = RawPage(url=url, html=b"<html><body><p>Sent over TLS.</p></body></html>")

        async def send() -> None:
            client = producer(secure_settings)
            await client.start()
            try:
                await client.send_and_wait(
                    secure_settings.topic_prefix + PAGES, to_msgpack(page), key=url.encode()
                )
            finally:
                await client.stop()

        asyncio.run(asyncio.wait_for(send(), 60))
        outputs = asyncio.run(
            wait_for_outputs(
                secure_settings, [url.encode()], deadline_s=90, alive=lambda: worker.poll() is None
            )
        )
    finally:
        if worker.poll() is None:
            worker.terminate()
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    logged = log_path.read_text(errors="replace")
    assert [message.topic for message in outputs] == [RECORDS], logged[-3000:]
    assert json.loads(outputs[0].value)["url"] == url
    assert secure_settings.sasl_password not in logged
    assert "Authenticated as dripstream via SCRAM-SHA-512" in logged


# -- the KRaft controller port --------------------------------------------------------------


def _kafka_tool(*args: str) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's own command-line tools from the broker's jars."""
    return subprocess.run(
        [
            "java",
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            f"-Dlog4j.configuration=file:{HOME / 'tools-log4j.properties'}",
            "-cp",
            str(HOME / "libs" / "*"),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )


def _port_open(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(2)
        return probe.connect_ex(("127.0.0.1", port)) == 0


# Add a PLAINTEXT listener to broker 1, as an attacker on the controller port would.
SMUGGLED_LISTENER = [
    "--alter",
    "--entity-type",
    "brokers",
    "--entity-name",
    "1",
    "--add-config",
    f"listeners=[SASL_SSL://127.0.0.1:{PORT},CONTROLLER://127.0.0.1:{CONTROLLER_PORT},"
    f"OPEN://127.0.0.1:{EXTRA_PORT}],"
    "listener.security.protocol.map=[SASL_SSL:SASL_SSL,CONTROLLER:SSL,OPEN:PLAINTEXT]",
]
# Short timeouts so a refused tool gives up quickly; no credentials of any kind.
NO_CREDENTIALS = {
    "plaintext": "security.protocol=PLAINTEXT\n",
    "tls-without-certificate": "security.protocol=SSL\nssl.truststore.type=PEM\n"
    f"ssl.truststore.location={HOME / 'tls' / 'ca.crt'}\n",
}


@pytest.mark.parametrize("client", sorted(NO_CREDENTIALS))
def test_the_controller_port_refuses_kafka_tools_without_a_certificate(
    secure_env: dict[str, str], tmp_path: Path, client: str
) -> None:
    config = tmp_path / "client.properties"
    config.write_text(
        NO_CREDENTIALS[client] + "request.timeout.ms=5000\ndefault.api.timeout.ms=15000\n"
    )
    common = ["--bootstrap-controller", f"127.0.0.1:{CONTROLLER_PORT}"]
    common += ["--command-config", str(config)]
    attempt = _kafka_tool("kafka.admin.ConfigCommand", *common, *SMUGGLED_LISTENER)
    output = attempt.stdout + attempt.stderr
    assert attempt.returncode != 0, output
    refusals = ("SslAuthenticationException", "Timed out", "timed out", "TimeoutException")
    assert any(word in output for word in refusals), output
    assert "Completed updating config" not in output
    # Nothing changed: no new listener, and the broker's own view has no override.
    assert not _port_open(EXTRA_PORT)
    described = _kafka_tool(
        "kafka.admin.ConfigCommand",
        "--bootstrap-server",
        f"127.0.0.1:{PORT}",
        "--command-config",
        str(HOME / "secrets" / "admin.properties"),
        "--describe",
        "--entity-type",
        "brokers",
        "--entity-name",
        "1",
    )
    assert described.returncode == 0, described.stderr
    assert "listeners=" not in described.stdout, described.stdout


def test_the_controller_port_serves_the_broker_certificate_holder(
    secure_env: dict[str, str],
) -> None:
    # The port is alive and speaks to whoever holds the broker's certificate (the broker,
    # an operator on the broker's host): the refusals above are authentication.
    described = _kafka_tool(
        "kafka.admin.ConfigCommand",
        "--bootstrap-controller",
        f"127.0.0.1:{CONTROLLER_PORT}",
        "--command-config",
        str(HOME / "secrets" / "controller.properties"),
        "--describe",
        "--entity-type",
        "brokers",
        "--entity-name",
        "1",
    )
    assert described.returncode == 0, described.stdout + described.stderr
    assert (HOME / "secrets" / "controller.properties").stat().st_mode & 0o777 == 0o600
