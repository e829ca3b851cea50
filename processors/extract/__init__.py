"""The per-page CPU work: simplify, Markdown, reconstruct, fallback, the sandbox."""
