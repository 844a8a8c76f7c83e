"""Protocol: the bytes and values llog stores and serves, with no I/O.

``codec`` (batch and shared-blob layouts), ``keys`` (Oxia/S3 key layout and
name validation), ``records`` (the JSON values in Oxia), ``structs`` (the
values callers pass and get back), ``http_error`` (the JSON error body of
both HTTP services), ``outcomes`` (what each error answer means: status,
retriable, definite or unknown), ``constants`` (the SPEC 7.0 deadlines ``D``
and ``G``), and the HTTP wire layouts (``http_json``, ``produce_binary``,
``consume_binary``, ``frame``, ``record_spans``). Imports only the
foundations (``server._errors``).
"""
