"""Training, label derivation and evaluation: development tooling the runtime never imports."""
