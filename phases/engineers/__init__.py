"""Engineers write candidate kernels: `offline` (codegen), `anthropic` (Claude), `replay`."""
