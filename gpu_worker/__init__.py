"""Model inference for the label stage: profiles (profiles.py + profiles/*.toml), prompt,
per-page answer constraint, vLLM engine and the ``VllmLabeller`` (labeller.py)."""
