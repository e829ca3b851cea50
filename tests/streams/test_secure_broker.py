"""The secure broker (``DRIPSTREAM_KAFKA_SECURE=1 scripts/broker.sh up``): TLS + SCRAM,
with an authorizer: one principal per role (``dripstream.streams.acls``), the admin the
only one that may create topics, users or ACLs or alter configs.

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
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.conn import create_conn
from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    KafkaConnectionError,
    SaslAuthenticationFailed,
    TopicAuthorizationFailedError,
)

from dripstream.streams.acls import ROLE_NAMES, apply_acls, stage_group
from dripstream.streams.kafka import client_options, consumer, create_topics, producer
from dripstream.streams.settings import StreamSettings
from dripstream.streams.tools import produce_pages, read_topics, wait_for_outputs
from dripstream.topics.catalog import (
    DEAD_LETTERS,
    FALLBACK,
    LABELLED,
    PAGES,
    RECORDS,
    TEMPLATES,
)
from dripstream.topics.records import RawPage

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
BROKER = ["bash", str(ROOT / "scripts" / "broker.sh")]
HOME = ROOT / ".cache" / "kafka-secure-test"
PORT = 19192
CONTROLLER_PORT = 19193
EXTRA_PORT = 19194  # where a smuggled PLAINTEXT listener would open
FAIL_WITHIN_S = 30  # a refused client must give up within this
BROKER_ENV = {
    **os.environ,
    "DRIPSTREAM_KAFKA_HOME": str(HOME),
    "DRIPSTREAM_KAFKA_PORT": str(PORT),
    "DRIPSTREAM_KAFKA_CONTROLLER_PORT": str(CONTROLLER_PORT),
    "DRIPSTREAM_KAFKA_SECURE": "1",
}


def broker(*command: str) -> subprocess.CompletedProcess[str]:
    """``scripts/broker.sh COMMAND`` on this module's secure broker."""
    return subprocess.run(
        [*BROKER, *command], env=BROKER_ENV, capture_output=True, text=True, timeout=300
    )


def exports(printed: str) -> dict[str, str]:
    """The ``export NAME=VALUE`` lines of ``printed``."""
    exported = {}
    for line in printed.splitlines():
        words = shlex.split(line)
        if words[:1] == ["export"]:
            name, _, value = words[1].partition("=")
            exported[name] = value
    return exported


def password_of(user: str) -> str:
    return (HOME / "secrets" / f"{user}.password").read_text().strip()


@pytest.fixture(scope="module")
def secure_env() -> Iterator[dict[str, str]]:
    """Start a fresh secure broker; yields the admin's client settings `up` printed."""

    # Leftovers of an interrupted run (our own state folder only), then an empty cluster;
    # jars, certificates and passwords are kept.
    broker("down")
    broker("reset")
    started = broker("up")
    if started.returncode != 0:
        pytest.fail(f"the secure broker did not start:\n{started.stdout}{started.stderr}")
    exported = exports(started.stdout)
    secrets = [password_of(user) for user in ("admin", *ROLE_NAMES)]
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
    """``secure_settings`` with the pipeline topics created and every role's ACLs on
    them, both by the admin."""
    asyncio.run(asyncio.wait_for(create_topics(secure_settings), 60))
    asyncio.run(asyncio.wait_for(apply_acls(secure_settings), 60))
    return secure_settings


def as_role(settings: StreamSettings, role: str) -> StreamSettings:
    """``settings`` with the credentials of ``role``'s principal."""
    return replace(
        settings,
        sasl_username=role,
        sasl_password=password_of(role),
        sasl_password_file=str(HOME / "secrets" / f"{role}.password"),
    )


def client_settings(user: str) -> dict[str, str]:
    return {
        "DRIPSTREAM_BROKERS": f"127.0.0.1:{PORT}",
        "DRIPSTREAM_SECURITY_PROTOCOL": "SASL_SSL",
        "DRIPSTREAM_SASL_MECHANISM": "SCRAM-SHA-512",
        "DRIPSTREAM_SASL_USERNAME": user,
        "DRIPSTREAM_SASL_PASSWORD_FILE": str(HOME / "secrets" / f"{user}.password"),
        "DRIPSTREAM_SSL_CAFILE": str(HOME / "tls" / "ca.crt"),
    }


def test_up_prints_the_admin_s_settings_and_env_each_role_s(secure_env: dict[str, str]) -> None:
    assert secure_env == client_settings("admin")
    passwords = {}
    for user in ("admin", *ROLE_NAMES):
        if user != "admin":
            printed = broker("env", user)
            assert printed.returncode == 0, printed.stderr
            assert exports(printed.stdout) == client_settings(user)
            assert password_of(user) not in printed.stdout + printed.stderr
        password_file = HOME / "secrets" / f"{user}.password"
        assert password_file.stat().st_mode & 0o777 == 0o600
        passwords[user] = password_of(user)
        assert len(passwords[user]) >= 32
    assert len(set(passwords.values())) == len(passwords)  # no role shares a password
    unknown = broker("env", "dripstream")
    assert unknown.returncode != 0 and "takes one role" in unknown.stderr


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


# -- least privilege: what each role's principal may not do ------------------------------


def test_no_role_may_create_topics(secure_settings: StreamSettings) -> None:
    for role in ROLE_NAMES:
        with pytest.raises(TopicAuthorizationFailedError):
            asyncio.run(asyncio.wait_for(create_topics(as_role(secure_settings, role)), 60))
    # The admin may, and the roles' refusals created nothing.
    outcome = asyncio.run(asyncio.wait_for(create_topics(secure_settings), 60))
    assert set(outcome.values()) == {"created"}


async def _send(settings: StreamSettings, short: str) -> None:
    client = producer(settings, request_timeout_ms=10_000)
    try:
        await client.start()
        await client.send_and_wait(settings.topic_prefix + short, b"value", key=b"key")
    finally:
        await client.stop()


# (role, topic it must not write): each is a topic another role owns. The monitor may
# write no topic at all, so its (idempotent) producer does not even get a producer id.
FOREIGN_WRITES = [
    ("simplify", TEMPLATES, TopicAuthorizationFailedError),
    ("simplify", LABELLED, TopicAuthorizationFailedError),
    ("label", RECORDS, TopicAuthorizationFailedError),
    ("crawler", RECORDS, TopicAuthorizationFailedError),
    ("reconstruct", PAGES, TopicAuthorizationFailedError),
    ("fallback", TEMPLATES, TopicAuthorizationFailedError),
    ("sink", PAGES, TopicAuthorizationFailedError),
    ("monitor", DEAD_LETTERS, ClusterAuthorizationFailedError),
]


@pytest.mark.parametrize(("role", "topic", "refusal"), FOREIGN_WRITES)
def test_a_role_may_not_write_another_role_s_topic(
    secure_topics: StreamSettings, role: str, topic: str, refusal: type[Exception]
) -> None:
    settings = as_role(secure_topics, role)
    with pytest.raises(refusal):
        asyncio.run(asyncio.wait_for(_send(settings, topic), 60))
    # Nothing arrived (the admin reads the topic).
    assert asyncio.run(read_topics(secure_topics, [topic], idle_s=1.0)) == []


def test_each_role_writes_its_own_topics(secure_topics: StreamSettings) -> None:
    own = [("crawler", PAGES), ("simplify", RECORDS), ("label", TEMPLATES)]
    own += [("reconstruct", FALLBACK), ("sink", DEAD_LETTERS)]
    for role, topic in own:
        asyncio.run(asyncio.wait_for(_send(as_role(secure_topics, role), topic), 60))
    shorts = sorted({topic for _, topic in own})
    written = asyncio.run(read_topics(secure_topics, shorts, idle_s=1.0))
    assert sorted(message.topic for message in written) == sorted(t for _, t in own)


async def _read_one(settings: StreamSettings, short: str) -> None:
    client = consumer(settings, request_timeout_ms=10_000)
    try:
        await client.start()
        client.assign([TopicPartition(settings.topic_prefix + short, 0)])
        await client.getmany(timeout_ms=5000)
    finally:
        await client.stop()


@pytest.mark.parametrize(("role", "topic"), [("crawler", RECORDS), ("sink", PAGES)])
def test_a_role_may_not_read_another_role_s_topic(
    secure_topics: StreamSettings, role: str, topic: str
) -> None:
    with pytest.raises(TopicAuthorizationFailedError):
        asyncio.run(asyncio.wait_for(_read_one(as_role(secure_topics, role), topic), 60))


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


PIPELINE_ROLES = ("simplify", "label", "reconstruct", "fallback", "sink")


async def _lag_view(settings: StreamSettings) -> tuple[dict, dict]:
    """The simplify group's committed offsets and the pages topic's end offsets, read as
    the monitor role."""
    monitor = as_role(settings, "monitor")
    admin = AIOKafkaAdminClient(**client_options(monitor))
    await admin.start()
    try:
        committed = await admin.list_consumer_group_offsets(stage_group(monitor, "simplify"))
    finally:
        await admin.close()
    reader = consumer(monitor)
    await reader.start()
    try:
        ends = await reader.end_offsets(list(committed))
    finally:
        await reader.stop()
    return committed, ends


def test_one_worker_per_stage_each_with_its_own_principal_turns_a_page_into_a_record(
    secure_topics: StreamSettings, tmp_path: Path
) -> None:
    """The k8s layout: a worker per stage, each logged in as its stage's role; the
    crawler's principal feeds the page, the sink's writes the record out."""
    secure_settings = secure_topics
    base = {k: v for k, v in os.environ.items() if not k.startswith("DRIPSTREAM_")}
    sunk = tmp_path / "sunk.jsonl"
    workers: dict[str, subprocess.Popen[bytes]] = {}
    for role in PIPELINE_ROLES:
        environment = {
            **base,
            **exports(broker("env", role).stdout),
            "DRIPSTREAM_STAGES": role,
            "DRIPSTREAM_TOPIC_PREFIX": secure_settings.topic_prefix,
            "DRIPSTREAM_GROUP_PREFIX": secure_settings.group_prefix,
            "DRIPSTREAM_WEB_PORT": "0",
            "DRIPSTREAM_DATA_DIR": str(tmp_path / "data"),
            "DRIPSTREAM_SINK": f"records:{sunk}",
        }
        with (tmp_path / f"{role}.log").open("wb") as log:
            workers[role] = subprocess.Popen(
                [sys.executable, "-m", "dripstream.streams.cli", "worker"],
                env=environment,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
            )

    def alive() -> bool:
        return all(worker.poll() is None for worker in workers.values())

    try:
        url = "https://secure.example/page"
        page = RawPage(url=url, html=b"<html><body><p>Sent over TLS.</p></body></html>")
        crawler = as_role(secure_settings, "crawler")
        ids = asyncio.run(asyncio.wait_for(produce_pages(crawler, [page], progress=False), 60))
        outputs = asyncio.run(wait_for_outputs(secure_settings, ids, deadline_s=150, alive=alive))
        for _ in range(60):  # the sink writes the record out
            if sunk.exists() and url in sunk.read_text():
                break
            if not alive():
                break
            time.sleep(1)
    finally:
        for worker in workers.values():
            if worker.poll() is None:
                worker.terminate()
        for worker in workers.values():
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
    logs = {role: (tmp_path / f"{role}.log").read_text(errors="replace") for role in workers}
    everything = "".join(log[-2000:] for log in logs.values())
    assert [message.topic for message in outputs] == [RECORDS], everything
    assert json.loads(outputs[0].value)["url"] == url
    assert url in sunk.read_text(), everything
    # KEDA's view, as the monitor: the simplify group's committed offsets and the pages
    # topic's end offsets (its lag), though it may read no message.
    committed, ends = asyncio.run(asyncio.wait_for(_lag_view(secure_settings), 60))
    positions = {part: meta.offset for part, meta in committed.items() if meta.offset >= 0}
    assert max(positions.values()) == 1  # the one page, committed
    assert all(ends[part] == position for part, position in positions.items())  # no lag
    for role, logged in logs.items():
        assert f"Authenticated as {role} via SCRAM-SHA-512" in logged, logged[-3000:]
        assert "Authenticated as admin" not in logged
        assert "AuthorizationFailed" not in logged, logged[-3000:]
        for user in ("admin", *ROLE_NAMES):
            assert password_of(user) not in logged


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


# -- the client port: Kafka's own tools with a worker's credentials -------------------------


def _tool_config(tmp_path: Path, user: str) -> Path:
    """Kafka tools' --command-config for ``user`` over SASL_SSL (mode 0600)."""
    config = tmp_path / f"{user}.properties"
    config.touch(mode=0o600)
    config.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required"
        f' username="{user}" password="{password_of(user)}";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={HOME / 'tls' / 'ca.crt'}\n"
        "request.timeout.ms=5000\ndefault.api.timeout.ms=15000\n"
    )
    return config


def _as_user(config: Path, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    common = ["--bootstrap-server", f"127.0.0.1:{PORT}", "--command-config", str(config)]
    return _kafka_tool(tool, *common, *args)


def _broker_overrides() -> str:
    described = _as_user(
        HOME / "secrets" / "admin.properties",
        "kafka.admin.ConfigCommand",
        *("--describe", "--entity-type", "brokers", "--entity-name", "1"),
    )
    assert described.returncode == 0, described.stderr
    return described.stdout


# A role that could alter the cluster's configuration (a listener: attack (a)) or create
# a user (attack (b)) would own the broker; every worker role is refused.
MALLORY_PASSWORD = "mallory-" + uuid.uuid4().hex
CLUSTER_ATTACKS = {
    "plaintext listener": SMUGGLED_LISTENER,
    "new SCRAM user": [
        *("--alter", "--entity-type", "users", "--entity-name", "mallory"),
        *("--add-config", f"SCRAM-SHA-512=[password={MALLORY_PASSWORD}]"),
    ],
}


@pytest.mark.parametrize("attack", sorted(CLUSTER_ATTACKS))
@pytest.mark.parametrize("role", ["simplify", "crawler"])
def test_a_worker_principal_may_not_alter_configs_or_create_users(
    secure_env: dict[str, str], tmp_path: Path, attack: str, role: str
) -> None:
    config = _tool_config(tmp_path, role)
    attempt = _as_user(config, "kafka.admin.ConfigCommand", *CLUSTER_ATTACKS[attack])
    output = attempt.stdout + attempt.stderr
    assert attempt.returncode != 0, output
    assert "ClusterAuthorizationException" in output, output
    assert "Completed updating config" not in output
    # Nothing changed: no listener opened, no override, and mallory cannot log in.
    assert not _port_open(EXTRA_PORT)
    assert "listeners=" not in _broker_overrides()
    mallory = StreamSettings.from_env(
        {**secure_env, "DRIPSTREAM_SASL_USERNAME": "mallory", "DRIPSTREAM_SASL_PASSWORD_FILE": ""},
        sasl_password=MALLORY_PASSWORD,
    )
    options = client_options(mallory)
    host, port = options.pop("bootstrap_servers")[0].split(":")

    async def connect() -> None:
        conn = await create_conn(host, int(port), **options)
        conn.close()

    with pytest.raises(SaslAuthenticationFailed):
        asyncio.run(asyncio.wait_for(connect(), FAIL_WITHIN_S))


def test_the_broker_has_an_authorizer_and_only_the_admin_may_list_acls(
    secure_topics: StreamSettings, tmp_path: Path
) -> None:
    listed = _as_user(HOME / "secrets" / "admin.properties", "kafka.admin.AclCommand", "--list")
    assert listed.returncode == 0, listed.stderr
    assert "No Authorizer" not in listed.stdout + listed.stderr
    assert "principal=User:simplify" in listed.stdout  # the ACLs `acls apply` created
    assert "principal=User:admin" not in listed.stdout  # a super user needs none
    refused = _as_user(_tool_config(tmp_path, "label"), "kafka.admin.AclCommand", "--list")
    assert refused.returncode != 0
    assert "ClusterAuthorizationException" in refused.stdout + refused.stderr
