"""The Kubernetes manifests stay consistent with the code: stages, groups, settings."""

from __future__ import annotations

from pathlib import Path

import yaml

from dripstream.gpu_worker.profiles import load_profile
from dripstream.processors.label.registry import LabellerOptions, budget_for
from dripstream.processors.sinks import SINKS
from dripstream.streams.acls import CRAWLER, MONITOR, ROLE_NAMES
from dripstream.streams.settings import SETTINGS, StreamSettings
from dripstream.streams.stages import DEFAULT_STAGES, STAGES

K8S = Path(__file__).resolve().parents[2] / "k8s"


def documents(folder: Path = K8S) -> list[dict]:
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    docs = []
    for resource in kustomization["resources"]:
        docs.extend(doc for doc in yaml.safe_load_all((folder / resource).read_text()) if doc)
    return docs


def by_kind(kind: str) -> list[dict]:
    return [doc for doc in documents() if doc["kind"] == kind]


def config_map(name: str = "dripstream") -> dict:
    (config,) = [doc for doc in by_kind("ConfigMap") if doc["metadata"]["name"] == name]
    return config


LABELLER_CONFIG = "dripstream-labeller"  # what only the stages that need the labeller read


def config_maps_read(spec: dict) -> list[str]:
    return [source["configMapRef"]["name"] for source in spec["containers"][0]["envFrom"]]


def test_every_stage_has_a_deployment_running_only_that_stage() -> None:
    stages = {}
    for deployment in by_kind("Deployment"):
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        args = container["args"]
        stages[args[args.index("--stages") + 1]] = deployment
    assert set(stages) == set(DEFAULT_STAGES)
    label = stages["label"]["spec"]["template"]["spec"]
    assert label["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1


def test_autoscaling_follows_the_lag_of_each_stage_s_own_group_and_topic() -> None:
    defaults = StreamSettings.from_env({})
    for scaled in by_kind("ScaledObject"):
        stage = scaled["metadata"]["name"].removeprefix("dripstream-")
        (trigger,) = scaled["spec"]["triggers"]
        assert (
            trigger["metadata"]["consumerGroup"]
            == StreamSettings.from_env({"DRIPSTREAM_STAGES": stage}).group_id()
        )
        assert trigger["metadata"]["topic"] == defaults.topic_prefix + STAGES[stage].input_topic
    assert len(by_kind("ScaledObject")) == len(DEFAULT_STAGES)
    assert len(DEFAULT_STAGES) == len(by_kind("PodDisruptionBudget"))


def test_configured_variables_are_documented_settings() -> None:
    known = {setting.env for setting in SETTINGS}
    assert {doc["metadata"]["name"] for doc in by_kind("ConfigMap")} == {
        "dripstream",
        LABELLER_CONFIG,
    }
    for config in by_kind("ConfigMap"):
        assert set(config["data"]) <= known
    for workload in by_kind("Deployment") + by_kind("Job"):
        spec = workload["spec"]["template"]["spec"]
        for container in spec["containers"] + spec.get("initContainers", []):
            for env in container.get("env", []):
                assert env["name"] in known or env["name"].startswith("DRIPSTREAM_VLLM_")


def test_simplify_and_label_budget_with_one_profile_and_its_tokenizer() -> None:
    """The profile (context size, tokenizer) is set once, read only by the stages that
    need the labeller (label runs it, simplify sizes pages by its budget), and their pods
    mount the weights folder its tokenizer is read from."""
    config = config_map(LABELLER_CONFIG)
    assert set(config["data"]) == {"DRIPSTREAM_LABELLER", "DRIPSTREAM_PROFILE", "DRIPSTREAM_MODEL"}
    assert not set(config["data"]) & set(config_map()["data"])
    load_profile(config["data"]["DRIPSTREAM_PROFILE"])
    model = config["data"]["DRIPSTREAM_MODEL"]
    for deployment in by_kind("Deployment"):
        spec = deployment["spec"]["template"]["spec"]
        names = {env["name"] for env in spec["containers"][0].get("env", [])}
        assert not names & {"DRIPSTREAM_PROFILE", "DRIPSTREAM_MODEL"}
        stage = spec["containers"][0]["args"][-1]
        assert (LABELLER_CONFIG in config_maps_read(spec)) == (stage in ("simplify", "label"))
        if stage in ("simplify", "label"):
            mounts = [m["mountPath"] for m in spec["containers"][0]["volumeMounts"]]
            assert any(model.startswith(path) for path in mounts), stage


def test_the_simplify_stage_budgets_for_the_labeller_the_label_stage_runs() -> None:
    """The labeller is set once for the simplify and label stages, so the simplify pods
    budget pages with the GPU model's context, not a CPU labeller's block cap (which
    would send pages the model cannot read on to the GPU pods)."""
    config = config_map(LABELLER_CONFIG)
    for deployment in by_kind("Deployment"):
        env = deployment["spec"]["template"]["spec"]["containers"][0].get("env", [])
        assert "DRIPSTREAM_LABELLER" not in {variable["name"] for variable in env}
    profile = load_profile(config["data"]["DRIPSTREAM_PROFILE"])
    options = LabellerOptions(profile=config["data"]["DRIPSTREAM_PROFILE"])
    budget = budget_for(config["data"]["DRIPSTREAM_LABELLER"], options).budget
    assert budget.max_blocks is None
    assert budget.context_tokens == profile.context_tokens


def _secrets_read(doc: dict) -> dict[str, set[str]]:
    """Secret name -> the keys a workload or a TriggerAuthentication reads of it."""
    read: dict[str, set[str]] = {}
    if doc["kind"] == "TriggerAuthentication":
        for ref in doc["spec"]["secretTargetRef"]:
            read.setdefault(ref["name"], set()).add(ref["key"])
        return read
    spec = doc["spec"]["template"]["spec"]
    for container in spec["containers"] + spec.get("initContainers", []):
        for env in container.get("env", []):
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                read.setdefault(ref["name"], set()).add(ref["key"])
    for volume in spec["volumes"]:
        if "secret" in volume:
            keys = {item["key"] for item in volume["secret"]["items"]}
            read.setdefault(volume["secret"]["secretName"], set()).update(keys)
    return read


def _readers() -> list[dict]:
    docs = documents() + documents(K8S / "sink")
    kinds = ("Deployment", "Job", "TriggerAuthentication")
    return [doc for doc in docs if doc["kind"] in kinds]


def _secret_templates() -> dict[str, dict[str, str]]:
    found = {}
    for path in (K8S / "secret.example.yaml", K8S / "sink" / "secret.example.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            found[doc["metadata"]["name"]] = doc["stringData"]
    return found


def _role_of(secret: str) -> str | None:
    """The broker role whose credentials a Secret holds (None: not the broker's)."""
    return (
        secret.removeprefix("dripstream-kafka-") if secret.startswith("dripstream-kafka-") else None
    )


def test_the_secret_templates_have_every_key_the_manifests_read() -> None:
    templates = _secret_templates()
    read: dict[str, set[str]] = {}
    for doc in _readers():
        for name, keys in _secrets_read(doc).items():
            read.setdefault(name, set()).update(keys)
    assert {name: set(keys) for name, keys in templates.items()} == read
    for name, data in templates.items():
        role = _role_of(name)
        if role is not None:
            assert data["username"] == role, name


def test_each_pod_holds_only_its_own_role_s_broker_credentials() -> None:
    """A worker logs in as its stage's role, KEDA as the monitor, the setup Job as the
    admin; no pod can read another role's Secret."""
    roles_seen = set()
    for doc in _readers():
        broker_secrets = {_role_of(name) for name in _secrets_read(doc)} - {None}
        if doc["kind"] == "Deployment":
            (container,) = doc["spec"]["template"]["spec"]["containers"]
            expected = container["args"][container["args"].index("--stages") + 1]
        elif doc["kind"] == "Job":
            expected = "admin"
        else:
            expected = MONITOR
        assert broker_secrets == {expected}, doc["metadata"]["name"]
        roles_seen.add(expected)
    assert roles_seen == set(ROLE_NAMES) - {CRAWLER} | {"admin"}


def _env_of(doc: dict) -> dict[str, str]:
    """A workload's environment: its ConfigMaps' data, then its containers' own env."""
    spec = doc["spec"]["template"]["spec"]
    env: dict[str, str] = {}
    for container in spec["containers"] + spec.get("initContainers", []):
        for source in container.get("envFrom", []):
            env.update(config_map(source["configMapRef"]["name"])["data"])
        env.update({e["name"]: e.get("value", "") for e in container.get("env", [])})
    return env


def _secret_files(doc: dict) -> dict[str, tuple[str, str]]:
    """File path -> (Secret, key) for each Secret key a workload's container mounts."""
    spec = doc["spec"]["template"]["spec"]
    volumes = {v["name"]: v["secret"] for v in spec["volumes"] if "secret" in v}
    files = {}
    for container in spec["containers"]:
        for mount in container.get("volumeMounts", []):
            secret = volumes.get(mount["name"])
            for item in (secret or {}).get("items", []):
                path = f"{mount['mountPath'].rstrip('/')}/{item['path']}"
                files[path] = (secret["secretName"], item["key"])
    return files


def test_only_the_label_pods_get_the_template_key_from_a_mounted_secret() -> None:
    """The label workers sign and check shared template states with one key, a file of a
    Secret mounted into them; no other pod is told of it or mounts it."""
    key_secrets = set()
    for doc in _readers():
        if doc["kind"] == "TriggerAuthentication":
            continue
        env = _env_of(doc)
        (container,) = doc["spec"]["template"]["spec"]["containers"]
        args = container.get("args", [])
        if doc["kind"] == "Deployment" and args[args.index("--stages") + 1] == "label":
            path = env["DRIPSTREAM_TEMPLATE_KEY_FILE"]
            secret, key = _secret_files(doc)[path]
            assert key in _secret_templates()[secret]
            key_secrets.add(secret)
        else:
            assert "DRIPSTREAM_TEMPLATE_KEY_FILE" not in env, doc["metadata"]["name"]
    assert key_secrets == {"dripstream-template-key"}
    for doc in _readers():
        if doc["metadata"]["name"] != "dripstream-label":
            assert "dripstream-template-key" not in _secrets_read(doc), doc["metadata"]["name"]


def test_only_the_setup_job_creates_topics_and_acls_as_the_admin() -> None:
    for deployment in by_kind("Deployment") + [
        doc for doc in documents(K8S / "sink") if doc["kind"] == "Deployment"
    ]:
        spec = deployment["spec"]["template"]["spec"]
        assert "initContainers" not in spec
        assert [c["args"][0] for c in spec["containers"]] == ["worker"]
    (job,) = by_kind("Job")
    spec = job["spec"]["template"]["spec"]
    (topics,) = spec["initContainers"]
    (acls,) = spec["containers"]
    assert topics["args"] == ["topics", "create"] and acls["args"] == ["acls", "apply"]
    assert topics["envFrom"] == acls["envFrom"] == [{"configMapRef": {"name": "dripstream"}}]
    assert set(_secrets_read(job)) == {"dripstream-kafka-admin"}


def test_keda_gets_the_workers_sasl_mechanism_in_its_own_spelling() -> None:
    config = config_map()
    secret = _secret_templates()["dripstream-kafka-monitor"]
    keda_names = {"SCRAM-SHA-512": "scram_sha512", "SCRAM-SHA-256": "scram_sha256"}
    assert secret["sasl-mechanism"] == keda_names[config["data"]["DRIPSTREAM_SASL_MECHANISM"]]
    assert secret["tls"] == "enable" and "SSL" in config["data"]["DRIPSTREAM_SECURITY_PROTOCOL"]


def test_the_models_volume_claim_is_shipped_and_mounted_read_only() -> None:
    (claim,) = by_kind("PersistentVolumeClaim")
    for deployment in by_kind("Deployment"):
        for volume in deployment["spec"]["template"]["spec"]["volumes"]:
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"] == {
                    "claimName": claim["metadata"]["name"],
                    "readOnly": True,
                }
    assert "ReadWriteMany" in claim["spec"]["accessModes"]  # many pods, many nodes


def test_topic_partitions_match_the_largest_replica_count() -> None:
    """Replicas beyond the input topic's partitions would sit idle."""
    config = config_map()
    partitions = int(config["data"]["DRIPSTREAM_PARTITIONS"])
    most = [scaled["spec"]["maxReplicaCount"] for scaled in by_kind("ScaledObject")]
    assert max(most) == partitions
    for scaled in by_kind("ScaledObject"):
        assert scaled["spec"]["minReplicaCount"] <= scaled["spec"]["maxReplicaCount"]
        assert scaled["spec"]["triggers"][0]["metadata"].get("allowIdleConsumers") != "true"


def test_deployments_scaled_by_keda_leave_the_replica_count_to_it() -> None:
    scaled = {doc["spec"]["scaleTargetRef"]["name"] for doc in by_kind("ScaledObject")}
    for deployment in by_kind("Deployment"):
        assert deployment["metadata"]["name"] in scaled
        assert "replicas" not in deployment["spec"]


MONITORING = K8S / "monitoring"
EXTERNAL_METRICS = {"kube_pod_container_status_restarts_total"}  # kube-state-metrics


def _exported_series() -> set[str]:
    from dripstream.streams import metrics

    names = set()
    for family in metrics.REGISTRY.collect():
        names.add(family.name + ("_total" if family.type == "counter" else ""))
        names |= {sample.name for sample in family.samples}
    for family in ("dripstream_label_batch_size", "dripstream_stage_seconds"):
        names |= {f"{family}_bucket", f"{family}_sum", f"{family}_count"}
    return names


def _queried_series(expr: str) -> set[str]:
    import re

    return set(re.findall(r"\b((?:dripstream|process|python|kube)_[a-z0-9_]+)", expr))


def test_alerts_and_dashboard_query_only_metrics_the_workers_export() -> None:
    import json

    rules = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    exprs = [rule["expr"] for group in rules["spec"]["groups"] for rule in group["rules"]]
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    exprs += [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    known = _exported_series() | EXTERNAL_METRICS
    for expr in exprs:
        series = _queried_series(expr)
        assert series, expr
        assert series <= known, (expr, series - known)


def test_the_alerts_cover_lag_dead_letters_restarts_and_labeller_fallbacks() -> None:
    rules = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    alerts = {rule["alert"]: rule["expr"] for g in rules["spec"]["groups"] for rule in g["rules"]}
    assert "dripstream_consumer_lag" in alerts["DripstreamConsumerLagGrowing"]
    assert 'route="deadletter"' in alerts["DripstreamDeadLetterRate"]
    assert "restarts" in alerts["DripstreamWorkerRestarts"]
    assert 'route="fallback"' in alerts["DripstreamLabellerFallbacks"]


def test_the_dashboard_shows_what_an_operator_watches() -> None:
    import json

    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    titles = {panel["title"] for panel in dashboard["panels"]}
    assert {
        "Pages/s by stage and route",
        "Consumer lag by topic",
        "Dead letters/s by error class",
        "Label batch size",
        "Label latency per page",
        "Template-cache hit rate",
    } <= titles
    import importlib.util

    path = K8S.parent / "scripts" / "make_dashboard.py"
    spec = importlib.util.spec_from_file_location("make_dashboard", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert dashboard == module.dashboard()  # the JSON is scripts/make_dashboard.py's output


def test_the_pod_monitor_scrapes_the_workers_metrics_port() -> None:
    (monitor,) = [
        doc for doc in yaml.safe_load_all((MONITORING / "podmonitor.yaml").read_text()) if doc
    ]
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    deployment = by_kind("Deployment")[0]
    ports = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert endpoint["port"] in {port["name"] for port in ports}
    assert endpoint["path"] == "/metrics"
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_the_optional_sink_stage_scales_on_the_records_topic_with_documented_settings() -> None:
    docs = documents(K8S / "sink")
    (deployment,) = [doc for doc in docs if doc["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["args"] == ["worker", "--stages", "sink"]
    env = {entry["name"]: entry for entry in container["env"]}
    assert set(env) <= {setting.env for setting in SETTINGS}
    sink = env["DRIPSTREAM_SINK"]["value"]
    assert sink.partition(":")[0] in SINKS
    settings = StreamSettings.from_env({"DRIPSTREAM_STAGES": "sink", "DRIPSTREAM_SINK": sink})
    (scaled,) = [doc for doc in docs if doc["kind"] == "ScaledObject"]
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["metadata"]["consumerGroup"] == settings.group_id()
    assert trigger["metadata"]["topic"] == settings.topic_prefix + STAGES["sink"].input_topic
    assert [doc["kind"] for doc in docs].count("PodDisruptionBudget") == 1
    search = _secret_templates()["dripstream-search"]
    assert env["DRIPSTREAM_SEARCH_USERNAME"]["valueFrom"]["secretKeyRef"]["name"] == (
        "dripstream-search"
    )
    assert _secrets_read(deployment)["dripstream-search"] == set(search)


def test_each_worker_keeps_its_data_dir_on_an_empty_dir_across_container_restarts() -> None:
    data_dir = config_map()["data"]["DRIPSTREAM_DATA_DIR"]
    deployments = by_kind("Deployment") + [
        doc for doc in documents(K8S / "sink") if doc["kind"] == "Deployment"
    ]
    assert len(deployments) == len(DEFAULT_STAGES) + 1
    for deployment in deployments:
        spec = deployment["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == data_dir]
        [volume] = [v for v in spec["volumes"] if v["name"] == mount["name"]]
        assert "emptyDir" in volume, deployment["metadata"]["name"]
