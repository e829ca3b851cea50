"""Processing steps of the dripstream pipeline."""
