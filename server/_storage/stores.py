"""``Stores``: the metadata store and object store one process works with.

The writer, reader, compactor, vacuum, compactor service and broker each
take a ``Stores`` (``stores=``) and use its two stores; whoever opened a
``Stores`` closes it. Handing one ``Stores`` to several parts gives the
process one Oxia session and one S3 connection pool instead of one per part.
A part given no ``Stores`` opens its own (from its configs, or around the
ready-made ``metadata_store``/``object_store`` it was handed, as tests do
with the in-memory fakes) and closes it with itself.

``Stores`` knows which of its two stores it opened: it closes only those,
so in-memory fakes shared between parts are never closed by one of them.
``Closeable`` is the lifecycle every such part shares: ``close()`` runs the
part's registered clean-ups once (safe to call twice), and the part is a
context manager.
"""

from __future__ import annotations

import contextlib
from typing import Mapping, Self

from .._config import OxiaConfig, S3Config
from .._metrics import LlogMetrics
from .metastore import MetadataStore, OxiaMetadataStore
from .objectstore import ObjectStore, S3ObjectStore

__all__ = ["Closeable", "Stores", "use_stores"]


class Closeable:
    """``close()`` runs everything registered on ``self._resources`` (an
    ExitStack, last registered first) exactly once; a context manager."""

    _resources: contextlib.ExitStack
    _closed: bool = False

    def close(self) -> None:
        self._closed = True
        self._resources.close()  # a second close finds the stack empty

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Stores(Closeable):
    """A metadata store and an object store, closing only those it opened."""

    def __init__(
        self, meta: MetadataStore, objects: ObjectStore, *, owns_meta: bool = False, owns_objects: bool = False
    ) -> None:
        self.meta = meta
        self.objects = objects
        self._resources = contextlib.ExitStack()
        if owns_meta:
            self._resources.callback(meta.close)
        if owns_objects:
            self._resources.callback(objects.close)

    @classmethod
    def open(
        cls,
        oxia_config: OxiaConfig,
        s3_config: S3Config,
        metrics: LlogMetrics | None = None,
        *,
        metadata_store: MetadataStore | None = None,
        object_store: ObjectStore | None = None,
    ) -> Stores:
        """Open the Oxia and S3 adapters that were not handed in."""
        metrics = metrics or LlogMetrics()
        meta = metadata_store or OxiaMetadataStore(oxia_config, metrics)
        try:
            objects = object_store or S3ObjectStore(s3_config, metrics)
        except BaseException:
            if metadata_store is None:
                meta.close()
            raise
        return cls(meta, objects, owns_meta=metadata_store is None, owns_objects=object_store is None)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, metrics: LlogMetrics | None = None) -> Stores:
        """Open both from ``LLOG_OXIA_*``, ``LLOG_ROOT_PREFIX`` and ``LLOG_S3_*``."""
        return cls.open(OxiaConfig.from_env(env), S3Config.from_env(env), metrics)


def use_stores(
    owner: Closeable,
    stores: Stores | None,
    oxia_config: OxiaConfig,
    s3_config: S3Config,
    metrics: LlogMetrics,
    metadata_store: MetadataStore | None,
    object_store: ObjectStore | None,
) -> Stores:
    """The ``Stores`` a part works with: the one it was given (not its to
    close), or one opened for it and closed with it. Starts the part's
    ``_resources`` stack."""
    owner._resources = contextlib.ExitStack()
    if stores is not None:
        return stores
    opened = Stores.open(oxia_config, s3_config, metrics, metadata_store=metadata_store, object_store=object_store)
    owner._resources.callback(opened.close)
    return opened
