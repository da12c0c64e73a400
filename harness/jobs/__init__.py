"""Code that runs inside the worker process, one job per module (see harness/worker.py)."""
