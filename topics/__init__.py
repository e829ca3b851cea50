"""The contract between stages: record types, codecs and topic definitions."""
