"""``StoreClient``: the shared lifecycle of everything that talks to Oxia and S3.

The writer, reader, compactor and vacuum each take optional ready-made
stores (tests pass in-memory fakes; a compactor shares its stores with its
reader). A StoreClient opens the stores it was not given, closes only those
it opened, is a context manager, and its ``close()`` is safe to call twice.
"""

from __future__ import annotations

from typing import Self

from .._config import OxiaConfig, S3Config
from ..leaderless_log_metrics import LlogMetrics
from .metastore import MetadataStore, OxiaMetadataStore
from .objectstore import ObjectStore, S3ObjectStore

__all__ = ["StoreClient"]


class StoreClient:
    _meta: MetadataStore
    _objects: ObjectStore
    _closed: bool = False

    def _open_stores(
        self,
        oxia_config: OxiaConfig,
        s3_config: S3Config,
        metrics: LlogMetrics,
        metadata_store: MetadataStore | None,
        object_store: ObjectStore | None,
    ) -> None:
        self._owns_meta = metadata_store is None
        self._owns_objects = object_store is None
        self._meta = metadata_store or OxiaMetadataStore(oxia_config, metrics)
        try:
            self._objects = object_store or S3ObjectStore(s3_config, metrics)
        except Exception:
            if self._owns_meta:
                self._meta.close()
            raise
        self._closed = False

    def _close_resources(self) -> None:
        """Subclasses release their own pools and helpers here (before the stores)."""

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._close_resources()
        if self._owns_objects:
            self._objects.close()
        if self._owns_meta:
            self._meta.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
