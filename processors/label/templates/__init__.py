"""Site templates learned online from a teacher labeller: per site and layout, the
teacher's labels counted per block signature, serving a site's next pages without the
teacher once the template has proven itself.

- ``signatures``: a block's signature and back-off signatures, a page's site.
- ``cache``: ``TemplateCache`` (vote, verification, shadow checks, bounded memory, the
  ``SiteState`` round trip) and its ``TemplateSettings``.
- ``cascade``: ``TemplateCascade``, the labeller that serves from the cache in front of a
  teacher labeller.
- ``export``: a state as reviewable CSS selectors, and a site's summary line.

The design and its reasons: docs/template-cache-design.md.
"""

from dripstream.processors.label.templates.cache import (
    JOIN_SHARE,
    NOT_SERVED,
    Cluster,
    Decision,
    TemplateCache,
    TemplateSettings,
    stale,
)
from dripstream.processors.label.templates.cascade import TEMPLATE_LABELLER, TemplateCascade
from dripstream.processors.label.templates.export import css_selector, export_site, site_summary
from dripstream.processors.label.templates.signatures import (
    BACKOFF,
    BACKOFF_MARK,
    EMPTY_MARK,
    LINKS_MARK,
    LINKS_SHARE,
    SIGNATURE_RULES,
    block_keys,
    block_signatures,
    generalise,
    load_public_suffixes,
    registrable_domain,
    text_weight,
)

__all__ = [
    "BACKOFF",
    "BACKOFF_MARK",
    "EMPTY_MARK",
    "JOIN_SHARE",
    "LINKS_MARK",
    "LINKS_SHARE",
    "NOT_SERVED",
    "SIGNATURE_RULES",
    "TEMPLATE_LABELLER",
    "Cluster",
    "Decision",
    "TemplateCache",
    "TemplateCascade",
    "TemplateSettings",
    "block_keys",
    "block_signatures",
    "css_selector",
    "export_site",
    "generalise",
    "load_public_suffixes",
    "registrable_domain",
    "site_summary",
    "stale",
    "text_weight",
]
