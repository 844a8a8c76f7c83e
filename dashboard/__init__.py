"""Draws the Grafana dashboard in ``grafana/`` to PNG, from Prometheus.

``python -m dashboard.render --help``; OBSERVABILITY.md says when to use it.
Needs matplotlib (the ``dashboard`` extra).
"""
