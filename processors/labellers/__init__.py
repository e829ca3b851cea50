"""Labellers: one label ("main" | "other") per block of a simplified page."""

from processors.labellers.base import Labeller, LabelOutcome

__all__ = ["LabelOutcome", "Labeller"]
