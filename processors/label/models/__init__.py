"""The learned labeller's model file (see processors/labellers/learned.py)."""
