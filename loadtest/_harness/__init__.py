"""Internals of the load-test harness (``loadtest/README.md``, "Load-test harness").

- ``hammer``: builds, configures and runs ``loadtest/http_hammer.go``, the Go HTTP load generator
"""
