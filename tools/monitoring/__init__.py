"""The monitoring we ship, from one source: alert rules and the metrics reference.

``python -m tools.monitoring [--check]`` writes (or checks) the PrometheusRule
under deploy/monitoring, the plain rules file beside it, and the metrics table
of docs/monitoring.md, all from ``tools.monitoring.alerts`` and the provider's
metrics registry.
"""
