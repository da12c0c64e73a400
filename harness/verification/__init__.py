"""Verification internals: observers installed in the worker (`guards`) and the tensor
plumbing shared by the verification jobs and the parent (`tensors`). The public entry is
`harness.verify.verify_candidate`."""
