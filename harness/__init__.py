"""kopt's harness: cases, deterministic data, the variant runner, verification and timing.

The harness knows nothing of phases or the UI: it measures and verifies a model and a
candidate.
"""
