"""Pages, teachers and states shared by the template-cache tests."""

from __future__ import annotations

import msgspec

from dripstream.processors.label.base import LabelOutcome
from dripstream.processors.label.templates import (
    TemplateCache,
    TemplateCascade,
    TemplateSettings,
    block_signatures,
    registrable_domain,
)
from dripstream.processors.pipeline import PipelineSettings, simplify_page
from dripstream.topics.records import MAIN, OTHER, RawPage, SimplifiedPage, SiteState


def simplified(url: str, html: str) -> SimplifiedPage:
    page = simplify_page(RawPage(url=url, html=html.encode()), PipelineSettings())
    assert isinstance(page, SimplifiedPage)
    return page


def article(site: str, number: int, extra: str = "", layout: str = "article") -> SimplifiedPage:
    body = (
        f'<div class="nav-{number} menu"><a href="/">Home</a> <a href="/b">B</a></div>'
        f'<{layout} class="story Story_body__x8Yz{number}Q"><h1>Headline number {number}</h1>'
        + "".join(
            f"<p>Paragraph {i} of story {number} with enough ordinary words in it.</p>"
            for i in range(3)
        )
        + f"</{layout}>{extra}"
        + '<div id="extras-2024"><p>Copyright and contact lines of the site.</p></div>'
    )
    return simplified(f"https://www.{site}/{layout}/{number}", f"<html><body>{body}")


class Teacher:
    """Labels by signature: the story's blocks main, the rest other."""

    name = "teacher"

    def __init__(self) -> None:
        self.calls = 0

    def label(self, pages):
        self.calls += len(pages)
        return [
            LabelOutcome(
                [MAIN if "story" in s else OTHER for s in block_signatures(p.simplified_html)]
            )
            for p in pages
        ]


def crafted_state(site: str, flip: bool = True) -> SiteState:
    """A verified-looking state of ``article``'s layout whose votes say the story is
    boilerplate and the copyright line main (``flip``), or the truth."""
    cache = TemplateCache(TemplateSettings(shadow_rate=0), seed=0)
    cascade = TemplateCascade(Teacher(), cache)
    for n in range(8):
        cascade.label([article(site, n)])
    state = cache.state(registrable_domain(f"https://www.{site}/"))
    assert state is not None
    if not flip:
        return state
    [cluster] = state.clusters
    counts = {key: (other, main) for key, (main, other) in cluster.counts.items()}
    return msgspec.structs.replace(
        state, clusters=[msgspec.structs.replace(cluster, counts=counts)]
    )
