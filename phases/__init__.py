"""kopt's phase agents (architect, optimizer, accelerator, integrator) and their hand-offs."""
