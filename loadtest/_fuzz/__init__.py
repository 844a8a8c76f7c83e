"""Internals of the HTTP fuzzer (``python -m loadtest.fuzz_http``), one module per concept:

- ``wire``: a raw-socket HTTP/1.1 client that sends exactly the bytes it is
  given and reads answers by their ``Content-Length``, with a deadline
- ``requests``: the valid requests every case starts from (JSON and binary
  produce, consume, the GET routes), each record value carrying a unique
  marker, and what a case is
- ``mutate_json``, ``mutate_binary``, ``mutate_http``, ``mutate_admin`` (the
  topic, delete-records, group-offset and producer routes): the cases, built
  from valid requests by seeded mutation, by kind; ``mutations``: their weights
  and the seeded choice of the next one
- ``oracle``: an independent decoder of produce bodies (what a 200 stored)
- ``checks``: what every answer must satisfy (documented statuses, the JSON
  error body, framing), and the resource watch of a process (RSS, open fds)
- ``ledger``: every produce sent with its outcome, checked against the log read back
- ``runner``: runs cases on worker threads with progress and health probes
- ``services``: starts a broker and a compactor service on a stack
- ``session``: one run end to end (warm-up, baseline, run, settle, read-back, report)
"""
