"""The topic catalogue (SPEC 4.8): which topics exist, their partition counts and configs.

- ``topic_config``: a topic's config (Kafka's names: ``retention.ms``,
  ``retention.bytes``, ``message.timestamp.type``, ``max.message.bytes``) and
  the defaults new topics get (``LLOG_TOPIC_DEFAULT_*``);
- ``record``: the catalogue record, one Oxia value per topic;
- ``catalogue``: create, describe, list, alter, add partitions, delete.
"""
