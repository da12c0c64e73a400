"""Execution targets: where a worker job runs (`local`, `ssh://...`, `ray://...`).

`base` holds the protocol every target implements, `resolve` turns a `--target` spec into a
target; `local`, `ssh` and `ray` are the implementations.
"""
