"""Writes k8s/monitoring/dashboard.json, the Grafana dashboard of a dripstream pipeline:
``python scripts/make_dashboard.py``. The panels are data here, so the JSON stays one
consistent file (tests/k8s checks every query names a metric the workers export)."""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "k8s" / "monitoring" / "dashboard.json"
NS = 'namespace="$namespace"'
RATE = "[$__rate_interval]"

# (title, unit, [(query, legend)], description)
PANELS = [
    (
        "Pages/s by stage and route",
        "reqps",
        [
            (
                f"sum by (stage, route) (rate(dripstream_pages_out_total{{{NS}}}{RATE}))",
                "{{stage}} -> {{route}}",
            )
        ],
        "Messages each stage produced, by where they went: simplified, labelled, record, "
        "fallback, deadletter.",
    ),
    (
        "Pages in/s by stage",
        "reqps",
        [(f"sum by (stage) (rate(dripstream_pages_in_total{{{NS}}}{RATE}))", "{{stage}}")],
        "Messages each stage consumed.",
    ),
    (
        "Consumer lag by topic",
        "short",
        [(f"sum by (topic) (dripstream_consumer_lag{{{NS}}})", "{{topic}}")],
        "Messages between each partition's end and the committed offset of the stage "
        "reading it, summed over partitions.",
    ),
    (
        "Dead letters/s by error class",
        "reqps",
        [
            (
                f"sum by (error_class) (rate(dripstream_errors_total{{{NS}}}{RATE}))",
                "{{error_class}}",
            )
        ],
        "Inputs that became dead letters, by class (docs/hostile-input.md).",
    ),
    (
        "Label batch size",
        "short",
        [
            (
                f"histogram_quantile(0.5, sum by (le) "
                f"(rate(dripstream_label_batch_size_bucket{{{NS}}}{RATE})))",
                "p50",
            ),
            (
                f"histogram_quantile(0.95, sum by (le) "
                f"(rate(dripstream_label_batch_size_bucket{{{NS}}}{RATE})))",
                "p95",
            ),
            (
                f"sum(rate(dripstream_label_batch_size_sum{{{NS}}}{RATE})) / "
                f"sum(rate(dripstream_label_batch_size_count{{{NS}}}{RATE}))",
                "mean",
            ),
        ],
        "Pages per labeller call.",
    ),
    (
        "Label latency per page",
        "s",
        [
            (
                f"histogram_quantile({q}, sum by (le) "
                f'(rate(dripstream_stage_seconds_bucket{{{NS}, stage="label"}}{RATE})))',
                f"p{p}",
            )
            for q, p in (("0.5", "50"), ("0.95", "95"), ("0.99", "99"))
        ],
        "Label stage time per message (batch time / batch size).",
    ),
    (
        "Stage latency p95",
        "s",
        [
            (
                f"histogram_quantile(0.95, sum by (stage, le) "
                f"(rate(dripstream_stage_seconds_bucket{{{NS}}}{RATE})))",
                "{{stage}}",
            )
        ],
        "Processing time per message, 95th percentile, by stage.",
    ),
    (
        "Template-cache hit rate",
        "percentunit",
        [
            (
                f'sum(rate(dripstream_template_pages_total{{{NS}, path=~"template|shadow"}}{RATE}))'
                f" / sum(rate(dripstream_template_pages_total{{{NS}}}{RATE}))",
                "served by templates",
            )
        ],
        "Share of label-stage pages served by a site template (template, shadow) rather "
        "than the labeller (teacher).",
    ),
    (
        "Labeller fallbacks",
        "percentunit",
        [
            (
                f"sum(rate(dripstream_pages_out_total"
                f'{{{NS}, stage="label", route="fallback"}}{RATE}))'
                f' / sum(rate(dripstream_pages_in_total{{{NS}, stage="label"}}{RATE}))',
                "fallback share",
            )
        ],
        "Share of label-stage pages the labeller gave up on (to the trafilatura fallback).",
    ),
    (
        "Agent crashes and worker restarts",
        "short",
        [
            (
                f"sum by (pod) (increase(dripstream_agent_crashes_total{{{NS}}}[15m]))",
                "agent crashes {{pod}}",
            ),
            (
                f"sum by (pod) (increase(kube_pod_container_status_restarts_total{{{NS}, "
                f'container="worker"}}[15m]))',
                "restarts {{pod}}",
            ),
        ],
        "Stage agent crashes (the worker then fails /healthz) and container restarts.",
    ),
    (
        "Worker memory (RSS)",
        "bytes",
        [(f'process_resident_memory_bytes{{{NS}, pod=~"dripstream-.*"}}', "{{pod}}")],
        "Resident memory of each worker process (per-page sandbox children not included).",
    ),
    (
        "Worker CPU",
        "percentunit",
        [(f'rate(process_cpu_seconds_total{{{NS}, pod=~"dripstream-.*"}}{RATE})', "{{pod}}")],
        "CPU seconds per second of each worker process.",
    ),
]


def dashboard() -> dict:
    panels = []
    for index, (title, unit, queries, description) in enumerate(PANELS):
        panels.append(
            {
                "id": index + 1,
                "type": "timeseries",
                "title": title,
                "description": description,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
                "targets": [
                    {
                        "refId": chr(ord("A") + number),
                        "datasource": {"type": "prometheus", "uid": "${datasource}"},
                        "expr": expr,
                        "legendFormat": legend,
                    }
                    for number, (expr, legend) in enumerate(queries)
                ],
            }
        )
    return {
        "uid": "dripstream",
        "title": "dripstream",
        "tags": ["dripstream", "kafka"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "type": "datasource",
                    "query": "prometheus",
                    "label": "Prometheus",
                },
                {
                    "name": "namespace",
                    "type": "query",
                    "label": "namespace",
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "query": "label_values(dripstream_pages_in_total, namespace)",
                    "refresh": 2,
                    "current": {"text": "dripstream", "value": "dripstream"},
                },
            ]
        },
        "panels": panels,
    }


if __name__ == "__main__":
    OUT.write_text(json.dumps(dashboard(), indent=1) + "\n")
    print(f"wrote {OUT}")
