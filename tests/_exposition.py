"""Reading a Prometheus text exposition in tests, with prometheus_client's parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def sample_value(text: str | bytes, name: str, **labels: str) -> float | None:
    """The sum of the samples called ``name`` whose labels include ``labels``;
    None when there is none (so a missing series fails an ``== 0`` check)."""
    if isinstance(text, bytes):
        text = text.decode()
    want = {k: str(v) for k, v in labels.items()}
    found = [
        s.value for family in text_string_to_metric_families(text) for s in family.samples
        if s.name == name and want.items() <= s.labels.items()
    ]
    return sum(found) if found else None
