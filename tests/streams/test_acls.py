"""Each role's ACLs, derived from the stage declarations (no broker: the secure-broker
tests apply them and show what they refuse)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from dripstream.processors.label.heuristic import HeuristicLabeller
from dripstream.streams.acls import (
    CRAWLER,
    MONITOR,
    PROVISION_TOPICS,
    ROLE_NAMES,
    STAGE_PROVISIONS,
    Acl,
    Operation,
    Resource,
    all_acls,
    role_acls,
    roles,
)
from dripstream.streams.settings import StreamSettings
from dripstream.streams.stages import STAGES, Provisions
from dripstream.topics.catalog import ALL_TOPICS, DEAD_LETTERS, PAGES

ROOT = Path(__file__).resolve().parents[2]


def settings(**env: str) -> StreamSettings:
    return StreamSettings.from_env(env)


def granted(role: str, base: StreamSettings | None = None) -> set[Acl]:
    base = base or settings()
    (found,) = [item for item in roles(base) if item.name == role]
    return set(role_acls(base, found))


def test_broker_sh_creates_one_scram_user_per_role() -> None:
    script = (ROOT / "scripts" / "broker.sh").read_text()
    (listed,) = re.findall(r"^ROLES=\(([^)]*)\)$", script, flags=re.MULTILINE)
    assert tuple(listed.split()) == ROLE_NAMES
    assert set(ROLE_NAMES) == {CRAWLER, MONITOR, *STAGES}


def test_the_simplify_role_s_acls_in_full() -> None:
    base = settings(DRIPSTREAM_TOPIC_PREFIX="p.", DRIPSTREAM_GROUP_PREFIX="g-")
    user = "User:simplify"
    expected = {Acl(user, Resource.TOPIC, f"p.{t}", Operation.DESCRIBE) for t in ALL_TOPICS}
    expected |= {
        Acl(user, Resource.TOPIC, "p.pages", Operation.READ),
        Acl(user, Resource.TOPIC, "p.simplified", Operation.WRITE),
        Acl(user, Resource.TOPIC, "p.fallback", Operation.WRITE),
        Acl(user, Resource.TOPIC, "p.records", Operation.WRITE),
        Acl(user, Resource.TOPIC, "p.deadletters", Operation.WRITE),
        Acl(user, Resource.GROUP, "g-simplify", Operation.READ),
    }
    assert granted("simplify", base) == expected


def _of(acls: set[Acl], operation: Operation, resource: Resource = Resource.TOPIC) -> set[str]:
    return {acl.name for acl in acls if acl.operation == operation and acl.resource == resource}


def test_a_stage_role_reads_its_input_in_its_group_and_writes_its_routes_and_dead_letters() -> None:
    base = settings()
    prefix = base.topic_prefix
    for name, stage in STAGES.items():
        acls = granted(name, base)
        extra_reads = {t for p in STAGE_PROVISIONS.get(name, ()) for t in PROVISION_TOPICS[p][0]}
        extra_writes = {t for p in STAGE_PROVISIONS.get(name, ()) for t in PROVISION_TOPICS[p][1]}
        assert _of(acls, Operation.READ) == {prefix + stage.input_topic} | {
            prefix + t for t in extra_reads
        }
        routes = {route.topic for route in stage.routes} | {DEAD_LETTERS} | extra_writes
        assert _of(acls, Operation.WRITE) == {prefix + t for t in routes}
        assert prefix + stage.input_topic not in _of(acls, Operation.WRITE)
        # The group of a worker that runs this stage alone (the k8s layout), nothing else.
        alone = settings(DRIPSTREAM_STAGES=name).group_id()
        assert _of(acls, Operation.READ, Resource.GROUP) == {alone}
        assert _of(acls, Operation.DESCRIBE) == {prefix + t for t in ALL_TOPICS}


def test_the_crawler_writes_only_pages_and_the_monitor_only_describes() -> None:
    base = settings()
    crawler = granted(CRAWLER, base)
    assert _of(crawler, Operation.WRITE) == {base.topic_prefix + PAGES}
    assert not _of(crawler, Operation.READ) and not _of(crawler, Operation.READ, Resource.GROUP)
    monitor = granted(MONITOR, base)
    assert {acl.operation for acl in monitor} == {Operation.DESCRIBE}
    groups = {settings(DRIPSTREAM_STAGES=name).group_id() for name in STAGES}
    assert _of(monitor, Operation.DESCRIBE, Resource.GROUP) == groups


def test_the_acls_follow_the_topic_and_group_prefixes() -> None:
    base = settings(DRIPSTREAM_TOPIC_PREFIX="tenant-a.", DRIPSTREAM_GROUP_PREFIX="tenant-a-")
    acls = all_acls(base)
    assert {acl.principal for acl in acls} == {f"User:{role}" for role in ROLE_NAMES}
    for acl in acls:
        prefix = base.topic_prefix if acl.resource == Resource.TOPIC else base.group_prefix
        assert acl.name.startswith(prefix), acl
    assert not set(acls) & set(all_acls(settings()))


class RecordingProvisions(Provisions):
    """Provisions that note which ones a stage builder asks for."""

    def __init__(self) -> None:
        super().__init__(
            labeller=HeuristicLabeller,
            source_reader=lambda: _Nothing(),
            template_store=lambda cache: _Nothing(),
        )
        self.asked: list[str] = []

    def need(self, what: str, stage: str) -> Any:
        self.asked.append(what)
        return super().need(what, stage)


class _Nothing:
    async def fetch(self, refs: list) -> dict:
        return {}

    async def ensure_started(self) -> None:
        return None

    async def publish(self) -> None:
        return None


def test_the_topics_a_stage_s_provisions_reach_are_the_ones_its_builder_asks_for(
    tmp_path: Path,
) -> None:
    base = replace(settings(), templates=True, sink=f"records:{tmp_path / 'out.jsonl'}")
    for name, stage in STAGES.items():
        provisions = RecordingProvisions()
        stage.build(base, provisions)
        assert tuple(provisions.asked) == STAGE_PROVISIONS.get(name, ()), name
        assert set(provisions.asked) <= set(PROVISION_TOPICS)


def test_acls_show_prints_every_acl_and_apply_on_an_unreachable_broker_exits_3() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRIPSTREAM_")}
    env["DRIPSTREAM_BROKERS"] = f"127.0.0.1:{port}"
    command = [sys.executable, "-m", "dripstream.streams.cli", "acls"]
    shown = subprocess.run([*command, "show"], env=env, capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == [acl.show() for acl in all_acls(settings())]
    assert "User:label WRITE topic dripstream.templates" in shown.stdout
    applied = subprocess.run(
        [*command, "apply"], env=env, capture_output=True, text=True, timeout=120
    )
    assert applied.returncode == 3
    assert (
        applied.stderr.strip()
        == f"error: broker unreachable at 127.0.0.1:{port} (DRIPSTREAM_BROKERS)"
    )
