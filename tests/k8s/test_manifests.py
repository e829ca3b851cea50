"""The Kubernetes manifests stay consistent with the code: stages, groups, settings."""

from __future__ import annotations

from pathlib import Path

import yaml

from gpu_worker.profiles import load_profile
from streams.settings import SETTINGS, StreamSettings
from streams.stages import DEFAULT_STAGES, STAGES

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
    (config,) = by_kind("ConfigMap")
    assert set(config["data"]) <= known
    for deployment in by_kind("Deployment"):
        for env in deployment["spec"]["template"]["spec"]["containers"][0].get("env", []):
            assert env["name"] in known or env["name"].startswith("DRIPSTREAM_VLLM_")


def test_simplify_and_label_budget_with_one_profile_and_its_tokenizer() -> None:
    """The profile (context size, tokenizer) is set once, for every stage, and the simplify
    pods mount the weights folder its tokenizer is read from."""
    (config,) = by_kind("ConfigMap")
    load_profile(config["data"]["DRIPSTREAM_PROFILE"])
    model = config["data"]["DRIPSTREAM_MODEL"]
    for deployment in by_kind("Deployment"):
        spec = deployment["spec"]["template"]["spec"]
        names = {env["name"] for env in spec["containers"][0].get("env", [])}
        assert not names & {"DRIPSTREAM_PROFILE", "DRIPSTREAM_MODEL"}
        stage = spec["containers"][0]["args"][-1]
        if stage in ("simplify", "label"):
            mounts = [m["mountPath"] for m in spec["containers"][0]["volumeMounts"]]
            assert any(model.startswith(path) for path in mounts), stage
