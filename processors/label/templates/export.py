"""Site templates for people: a state as CSS selectors (``export_site``) and a site's
summary line (``site_summary``), for the ``templates`` command."""

from __future__ import annotations

from dripstream.processors.label.templates.cache import Cluster, TemplateSettings, stale
from dripstream.processors.label.templates.signatures import (
    BACKOFF_MARK,
    EMPTY_MARK,
    LINKS_MARK,
)
from dripstream.topics.records import MAIN, OTHER, SiteState

_MARK_NOTES = {LINKS_MARK: "mostly link text", EMPTY_MARK: "no text"}  # in css_selector


def css_selector(signature: str) -> str:
    """A signature as a CSS selector a person can read and a browser can run: generalised
    tokens become prefix attribute matches, wholly machine-made ones are left out."""
    steps = []
    mark = next((m for m in _MARK_NOTES if signature.endswith(m)), "")
    for step in signature.removesuffix(mark).split(">"):
        head, *classes = step.split(".")  # a generalised class may hold "#": the id leads
        tag, _, element_id = head.partition("#")
        selector = tag
        for token in classes:
            selector += _class_selector(token)
        if element_id:  # one lowercase word (``_LAYOUT_ID``): exact
            selector += f"#{element_id}"
        steps.append(selector)
    return " > ".join(steps) + (f" /* {_MARK_NOTES[mark]} */" if mark else "")


def _class_selector(token: str) -> str:
    cut = min((i for i in (token.find("#"), token.find("*")) if i >= 0), default=-1)
    if cut < 0:
        return f".{token}"
    return f'[class*="{token[:cut]}"]' if cut else ""


def export_site(state: SiteState, settings: TemplateSettings | None = None) -> dict[str, object]:
    """A site's templates as a reviewable configuration, like PACE's per-publisher one:
    per layout, CSS selectors of the main region and of the excluded regions (the teacher
    labelled them so with at least ``agreement`` of its labels), of the uncertain ones
    (labelled both ways: the template gives them the majority label, only on pages whose
    other blocks make up for it), and (``*_backoff``) the shorter selectors used only for
    a block no full selector knows."""
    settings = settings or TemplateSettings()
    layouts = []
    for number, cluster_state in enumerate(state.clusters):
        cluster = Cluster.from_state(cluster_state, settings)
        groups: dict[str, list[str]] = {
            "main": [],
            "exclude": [],
            "uncertain": [],
            "main_backoff": [],
            "exclude_backoff": [],
        }
        for key in sorted(cluster.counts):
            vote = cluster.vote(key, settings)
            label = vote[0] if vote is not None and vote[1] >= settings.agreement else None
            backoff = key.startswith(BACKOFF_MARK)
            if backoff and label is None:
                continue
            group = "main" if label == MAIN else "exclude" if label == OTHER else "uncertain"
            groups[f"{group}_backoff" if backoff else group].append(css_selector(key))
        layouts.append(
            {
                "layout": number,
                "verified": cluster.verified(settings),
                "suspended": cluster.suspended,
                "pages_taught": cluster.taught,
                "pages_served": cluster.served,
                "recent_agreement": [round(value, 3) for value in cluster.recent],
                **{key: sorted(set(values)) for key, values in groups.items()},
            }
        )
    return {"site": state.site, "stale": stale(state), "layouts": layouts}


def site_summary(state: SiteState) -> str:
    """A site's line in ``templates list``: layouts, pages taught and served, ``stale``
    for a state the workers will relearn."""
    taught = sum(cluster.taught for cluster in state.clusters)
    served = sum(cluster.served for cluster in state.clusters)
    line = f"{state.site}\tlayouts={len(state.clusters)}\ttaught={taught}\tserved={served}"
    return line + ("\tstale" if stale(state) else "")
