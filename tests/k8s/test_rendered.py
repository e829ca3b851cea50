"""The manifests as a cluster gets them: each kustomization rendered (the subset of
kustomize the manifests use, refusing anything else), every object validated offline -
built-in kinds against Kubernetes' own JSON schemas (kubernetes-validate, strict), KEDA
and Prometheus Operator objects against schemas generated from their CRDs (cloudcoil's
models of KEDA 2.16 and prometheus-operator 0.80, strict: an unknown field fails)."""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

K8S = Path(__file__).resolve().parents[2] / "k8s"
KUBERNETES_VERSION = "1.33"  # oldest release the manifests promise to apply on
SUPPORTED = {"apiVersion", "kind", "namespace", "resources", "configMapGenerator"}
SUPPORTED |= {"generatorOptions"}
CLUSTER_SCOPED = {"Namespace"}


def render(folder: Path) -> list[dict]:
    """``kustomize build folder`` for the features used here: resources (files),
    namespace, configMapGenerator from files with labels, no name-suffix hash."""
    spec = yaml.safe_load((folder / "kustomization.yaml").read_text())
    assert set(spec) <= SUPPORTED, f"unsupported kustomize fields: {set(spec) - SUPPORTED}"
    docs = []
    for resource in spec.get("resources", []):
        assert (folder / resource).is_file(), f"{resource}: only files are rendered here"
        docs.extend(doc for doc in yaml.safe_load_all((folder / resource).read_text()) if doc)
    options = spec.get("generatorOptions", {})
    for generator in spec.get("configMapGenerator", []):
        assert options.get("disableNameSuffixHash") is True, "name-suffix hashes not rendered"
        assert set(generator) <= {"name", "files", "options"}, generator
        data = {Path(name).name: (folder / name).read_text() for name in generator["files"]}
        meta = {"name": generator["name"], **generator.get("options", {})}
        docs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})
    for doc in docs:
        if doc["kind"] not in CLUSTER_SCOPED and "namespace" in spec:
            doc["metadata"]["namespace"] = spec["namespace"]
    return docs


def _strict(schema: object) -> object:
    """Every object with declared properties refuses undeclared ones (as kubectl's
    server-side field validation does); Go's inline regex flags move to the front, where
    Python's re wants them."""
    if isinstance(schema, dict):
        schema = {key: _strict(value) for key, value in schema.items()}
        pattern = schema.get("pattern")
        if isinstance(pattern, str) and "(?i)" in pattern[1:]:
            schema["pattern"] = "(?i)" + pattern.replace("(?i)", "")
        if "properties" in schema and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    return schema


@cache
def crd_schema(api_version: str, kind: str) -> dict:
    from cloudcoil.models.keda import v1alpha1 as keda
    from cloudcoil.models.prometheus_operator import v1 as monitoring

    models = {
        ("keda.sh/v1alpha1", "ScaledObject"): keda.ScaledObject,
        ("keda.sh/v1alpha1", "TriggerAuthentication"): keda.TriggerAuthentication,
        ("monitoring.coreos.com/v1", "PodMonitor"): monitoring.PodMonitor,
        ("monitoring.coreos.com/v1", "PrometheusRule"): monitoring.PrometheusRule,
    }
    model = models[(api_version, kind)]
    return _strict(model.model_json_schema(by_alias=True, mode="validation"))


def validate(doc: dict) -> None:
    if "." in doc["apiVersion"].split("/")[0] and doc["apiVersion"].split("/")[0] not in (
        "apps",
        "policy",
        "batch",
    ):
        # A custom resource: its CRD's schema (status is the controller's to write).
        assert "status" not in doc
        jsonschema.validate(doc, crd_schema(doc["apiVersion"], doc["kind"]))
    else:
        kubernetes_validate.validate(copy.deepcopy(doc), KUBERNETES_VERSION, strict=True)


def all_objects() -> list[tuple[str, dict]]:
    found = []
    for folder in (K8S, K8S / "monitoring", K8S / "sink"):
        found += [(f"{folder.name}:{d['kind']}/{d['metadata']['name']}", d) for d in render(folder)]
    for example in (K8S / "secret.example.yaml", K8S / "sink" / "secret.example.yaml"):
        found += [
            (f"{example.parent.name}:secret.example", doc)
            for doc in yaml.safe_load_all(example.read_text())
        ]
    return found


@pytest.mark.parametrize(("name", "doc"), all_objects(), ids=[n for n, _ in all_objects()])
def test_every_rendered_object_is_valid_for_its_schema(name: str, doc: dict) -> None:
    validate(doc)


def test_the_validators_refuse_what_a_cluster_would_refuse() -> None:
    docs = {d["kind"] + "/" + d["metadata"]["name"]: d for d in render(K8S)}
    deployment = copy.deepcopy(docs["Deployment/dripstream-simplify"])
    deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limit"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(deployment)
    scaled = copy.deepcopy(docs["ScaledObject/dripstream-simplify"])
    scaled["spec"]["maxReplicas"] = 3  # KEDA calls it maxReplicaCount
    with pytest.raises(jsonschema.ValidationError):
        validate(scaled)
    scaled = copy.deepcopy(docs["ScaledObject/dripstream-simplify"])
    scaled["spec"]["maxReplicaCount"] = "forty"
    with pytest.raises(jsonschema.ValidationError):
        validate(scaled)


def test_rendering_puts_everything_in_the_namespace_and_generates_the_dashboard() -> None:
    docs = render(K8S) + render(K8S / "monitoring")
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] != "Namespace"} == {
        "dripstream"
    }
    (dashboard,) = [d for d in docs if d["metadata"]["name"] == "dripstream-dashboard"]
    assert dashboard["metadata"]["labels"] == {"grafana_dashboard": "1"}
    json.loads(dashboard["data"]["dashboard.json"])
