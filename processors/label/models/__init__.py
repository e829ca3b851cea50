"""The learned labeller's model file (see processors/label/learned.py)."""
