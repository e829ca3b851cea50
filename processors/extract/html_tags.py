"""Tag groups shared by the simplifier and the Markdown converter, and the visible text
of a mapping block (``block_text``)."""

import html as htmlmod
import re

BLOCK_TAGS = frozenset(
    "address article aside blockquote body center dd details dialog div dl dt fieldset "
    "figcaption figure footer form h1 h2 h3 h4 h5 h6 header hgroup hr html li main menu nav "
    "ol p pre section summary table tbody thead tfoot tr td th caption ul legend".split()
)
HEADING_TAGS = frozenset(("h1", "h2", "h3", "h4", "h5", "h6"))
VOID_TAGS = frozenset(
    "area base br col embed hr img input link meta param source track wbr".split()
)

_TAG = re.compile(r"<[^>]*>")


def block_text(mapping_block: str) -> str:
    """Visible text of one mapping block (tags dropped, entities unescaped)."""
    return htmlmod.unescape(_TAG.sub(" ", mapping_block))
