"""Controller runtime for the provider: a rate-limited work queue, metrics and JSON logs.

Nothing here talks to the Kubernetes API; the module that does feeds the queue,
records its API calls through ``metrics.record_api_request`` and logs through the
setup in ``logs``.
"""
