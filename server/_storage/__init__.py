"""Storage: the two seams to the outside world and their lifecycle.

``metastore`` (metadata-store Protocol, Oxia adapter, in-memory fake),
``objectstore`` (object-store Protocol, S3 adapter, in-memory fake),
``s3_lean`` (lean SigV4 GET and PUT), ``oxia_compat`` (fixes for the oxia client),
``oxia_channel`` (its channels: request deadlines, keepalive),
``stores`` (opening and closing both). Imports ``server._protocol`` and the
foundations, nothing above.
"""
