"""Wiring only: the command line, and (with the stream stages) the Kafka agents."""
