"""Least privilege on a secure broker: one SCRAM principal per role, and its ACLs.

The roles are every stage of ``STAGES`` plus ``crawler`` (feeds the pages topic) and
``monitor`` (reads consumer lag, for KEDA). A stage's role may read its input topic in
its own consumer group (``group_id`` of a worker running that stage alone), write every
topic its routes name and the dead letters, and use the topics its provisions reach (the
fallback stage reads pages back, the label stage shares site templates). Every role may
describe the pipeline topics (a starting worker waits for them). All ACLs are LITERAL
topic and group names under ``DRIPSTREAM_TOPIC_PREFIX`` / ``DRIPSTREAM_GROUP_PREFIX``.

Everything else (creating topics, users and ACLs, altering configs, replaying dead
letters, dropping templates) is the admin's: the broker's only super user besides itself.
``dripstream acls apply``, run as the admin, creates the ACLs (idempotent); ``dripstream
acls show`` prints them. ``scripts/broker.sh`` creates one SCRAM user per role
(``ROLES`` there equals ``ROLE_NAMES``, checked by a test).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import IntEnum

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import for_code
from aiokafka.protocol.admin import CreateAclsRequest

from dripstream.streams.kafka import client_options
from dripstream.streams.settings import StreamSettings
from dripstream.streams.stages import STAGES
from dripstream.topics.catalog import ALL_TOPICS, DEAD_LETTERS, PAGES, TEMPLATES

CRAWLER = "crawler"
MONITOR = "monitor"
ROLE_NAMES: tuple[str, ...] = (CRAWLER, *STAGES, MONITOR)

# What each worker provision reaches, beyond the stage's declared routes:
# provision -> (topics read, topics written).
PROVISION_TOPICS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "source_reader": ((PAGES,), ()),
    "template_store": ((TEMPLATES,), (TEMPLATES,)),
    "labeller": ((), ()),
    "runners": ((), ()),
}
# The provisions each stage's builder asks for (checked against the builders by a test).
STAGE_PROVISIONS: dict[str, tuple[str, ...]] = {
    "label": ("labeller", "template_store"),
    "fallback": ("source_reader",),
}


class Resource(IntEnum):
    """Kafka's resource type codes (CreateAcls)."""

    TOPIC = 2
    GROUP = 3


class Operation(IntEnum):
    """Kafka's ACL operation codes."""

    READ = 3
    WRITE = 4
    DESCRIBE = 8


LITERAL = 3  # resource pattern type
ALLOW = 3  # permission type


@dataclass(frozen=True, order=True)
class Acl:
    """One ALLOW rule: ``principal`` may ``operation`` the LITERAL ``resource`` ``name``,
    from any host."""

    principal: str
    resource: Resource
    name: str
    operation: Operation

    def show(self) -> str:
        return f"{self.principal} {self.operation.name} {self.resource.name.lower()} {self.name}"


@dataclass(frozen=True)
class Role:
    """What one principal may do: topics (short names) it reads and writes, the consumer
    group it reads in, the groups it may only describe."""

    name: str
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    group: str = ""
    describes_groups: tuple[str, ...] = ()

    @property
    def principal(self) -> str:
        return f"User:{self.name}"


def stage_group(settings: StreamSettings, stage: str) -> str:
    """The consumer group of a worker that runs ``stage`` alone."""
    return replace(settings, stages=(stage,)).group_id()


def roles(settings: StreamSettings) -> list[Role]:
    """Every role, in ``ROLE_NAMES`` order, for the settings' group prefix."""
    found = [Role(CRAWLER, writes=(PAGES,))]
    for stage in STAGES.values():
        reads = [stage.input_topic]
        writes = [route.topic for route in stage.routes] + [DEAD_LETTERS]
        for provision in STAGE_PROVISIONS.get(stage.name, ()):
            extra_reads, extra_writes = PROVISION_TOPICS[provision]
            reads += extra_reads
            writes += extra_writes
        found.append(
            Role(
                stage.name,
                reads=tuple(dict.fromkeys(reads)),
                writes=tuple(dict.fromkeys(writes)),
                group=stage_group(settings, stage.name),
            )
        )
    groups = tuple(stage_group(settings, name) for name in STAGES)
    found.append(Role(MONITOR, describes_groups=groups))
    return found


def role_acls(settings: StreamSettings, role: Role) -> list[Acl]:
    """The ACLs of one role under the settings' topic and group prefixes."""
    topic = settings.topic_prefix
    acls = [
        Acl(role.principal, Resource.TOPIC, topic + short, Operation.DESCRIBE)
        for short in ALL_TOPICS
    ]
    acls += [Acl(role.principal, Resource.TOPIC, topic + t, Operation.READ) for t in role.reads]
    acls += [Acl(role.principal, Resource.TOPIC, topic + t, Operation.WRITE) for t in role.writes]
    if role.group:
        acls.append(Acl(role.principal, Resource.GROUP, role.group, Operation.READ))
    acls += [
        Acl(role.principal, Resource.GROUP, group, Operation.DESCRIBE)
        for group in role.describes_groups
    ]
    return acls


def all_acls(settings: StreamSettings) -> list[Acl]:
    """Every role's ACLs."""
    return [acl for role in roles(settings) for acl in role_acls(settings, role)]


async def apply_acls(settings: StreamSettings) -> list[Acl]:
    """Create every role's ACLs on the broker (existing ones stay as they are); the
    settings' principal must be allowed to (the admin). Returns the ACLs; a refusal
    raises the broker's error (ClusterAuthorizationFailedError, SecurityDisabledError
    on a broker without an authorizer)."""
    acls = all_acls(settings)
    client = AIOKafkaClient(**client_options(settings))
    await client.bootstrap()
    try:
        node = client.get_random_node()
        for acl in acls:
            request = CreateAclsRequest(
                acl.resource, acl.name, LITERAL, acl.principal, "*", acl.operation, ALLOW
            )
            response = await client.send(node, request)
            for code, message in response.creation_responses:
                if code:  # the broker's message may be a dump of the whole request
                    detail = f": {message}" if message and len(message) < 200 else ""
                    raise for_code(code)(f"{acl.show()}{detail}")
    finally:
        await client.close()
    return acls
