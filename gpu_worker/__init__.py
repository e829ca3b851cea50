"""Model inference for the label stage (vLLM); see the GPU worker issue."""
