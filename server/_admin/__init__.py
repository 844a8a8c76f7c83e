"""``llog-admin``: the operator's console script (topics today)."""
