"""Consumer groups: committed offsets per (group, topic, partition) in Oxia (``offsets.py``)."""
