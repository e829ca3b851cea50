"""Labellers: one label ("main" | "other") per block of a simplified page."""

from dripstream.processors.label.base import AsyncLabeller, Labeller, LabelOutcome

__all__ = ["AsyncLabeller", "LabelOutcome", "Labeller"]
