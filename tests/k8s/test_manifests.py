"""The Kubernetes manifests stay consistent with the code: stages, groups, settings."""

from __future__ import annotations

from pathlib import Path

import yaml

from streams.settings import SETTINGS, StreamSettings
from streams.stages import INPUT_TOPIC, STAGES

K8S = Path(__file__).resolve().parents[2] / "k8s"


def documents() -> list[dict]:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    docs = []
    for resource in kustomization["resources"]:
        docs.extend(doc for doc in yaml.safe_load_all((K8S / resource).read_text()) if doc)
    return docs


def by_kind(kind: str) -> list[dict]:
    return [doc for doc in documents() if doc["kind"] == kind]


def test_every_stage_has_a_deployment_running_only_that_stage() -> None:
    stages = {}
    for deployment in by_kind("Deployment"):
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        args = container["args"]
        stages[args[args.index("--stages") + 1]] = deployment
    assert set(stages) == set(STAGES)
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
        assert trigger["metadata"]["topic"] == defaults.topic_prefix + INPUT_TOPIC[stage]
    assert len(by_kind("ScaledObject")) == len(STAGES) == len(by_kind("PodDisruptionBudget"))


def test_configured_variables_are_documented_settings() -> None:
    known = {setting.env for setting in SETTINGS}
    (config,) = by_kind("ConfigMap")
    assert set(config["data"]) <= known
    for deployment in by_kind("Deployment"):
        for env in deployment["spec"]["template"]["spec"]["containers"][0].get("env", []):
            assert env["name"] in known or env["name"].startswith("DRIPSTREAM_VLLM_")
