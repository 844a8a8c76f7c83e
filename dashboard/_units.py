"""Grafana unit ids (``fieldConfig.defaults.unit``) as human numbers: ``250 ms``, ``12 MB/s``, ``$1.2K``.

A :class:`Unit` converts a value to its base unit (``MBs`` means the value is
already in MB/s: x 1e6 gives B/s; ``percentunit`` x 100 gives percent) and
then picks one rung of a ladder (ns, µs, ms, s, min, h; B, kB, MB, ...) for a
whole axis, from the largest magnitude it shows, so every tick reads in the
same unit. An unknown id is drawn as a plain number and named on the axis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Unit", "unit_for"]

Ladder = tuple[tuple[float, str], ...]
"""(size in base units, suffix), smallest first."""


def _ladder(base: float, *suffixes: str) -> Ladder:
    return tuple((base**i, suffix) for i, suffix in enumerate(suffixes))


_TIME: Ladder = ((1e-9, " ns"), (1e-6, " µs"), (1e-3, " ms"), (1.0, " s"), (60.0, " min"),
                 (3600.0, " h"), (86400.0, " day"))
_BYTES_IEC = _ladder(1024, " B", " KiB", " MiB", " GiB", " TiB", " PiB")
_BYTES_SI = _ladder(1000, " B", " kB", " MB", " GB", " TB", " PB")
_BYTES_IEC_RATE = _ladder(1024, " B/s", " KiB/s", " MiB/s", " GiB/s", " TiB/s")
_BYTES_SI_RATE = _ladder(1000, " B/s", " kB/s", " MB/s", " GB/s", " TB/s")
_BITS_SI = _ladder(1000, " b", " kb", " Mb", " Gb", " Tb")
_BITS_SI_RATE = _ladder(1000, " b/s", " kb/s", " Mb/s", " Gb/s", " Tb/s")
_SHORT = _ladder(1000, "", " K", " Mil", " Bil", " Tri")
_CURRENCY = _ladder(1000, "", "K", "M", "B", "T")
_PERCENT: Ladder = ((1.0, "%"),)


def _count(suffix: str) -> Ladder:
    return _ladder(1000, f" {suffix}", f"k {suffix}", f"M {suffix}", f"G {suffix}")


@dataclass(frozen=True)
class Unit:
    """How one Grafana unit id reads."""

    id: str
    ladder: Ladder = _SHORT
    to_base: float = 1.0
    """A value times this is in the ladder's base unit."""
    prefix: str = ""
    """Written before the number (currency symbols)."""
    known: bool = True
    """False for an id this table does not know: drawn as a plain number."""

    def rung(self, largest_abs: float) -> tuple[float, str]:
        """The ladder step (size, suffix) for values up to ``largest_abs`` (in base units)."""
        if not math.isfinite(largest_abs) or largest_abs <= 0:
            return next(((size, s) for size, s in self.ladder if size == 1.0), self.ladder[0])
        chosen = self.ladder[0]
        for size, suffix in self.ladder:
            if largest_abs >= size * (1 - 1e-9):
                chosen = (size, suffix)
        return chosen

    def format_scaled(self, scaled: float, suffix: str, decimals: int) -> str:
        """``scaled`` (already divided by the rung's size) with ``decimals`` digits and the suffix."""
        text = f"{abs(scaled):,.{decimals}f}"
        sign = "-" if scaled < 0 and float(text.replace(",", "")) != 0 else ""
        return f"{sign}{self.prefix}{text}{suffix}"

    def format(self, value: float) -> str:
        """One value (in the panel's own unit) with three significant digits: a stat, a legend."""
        if not math.isfinite(value):
            return str(value)
        base = value * self.to_base
        size, suffix = self.rung(abs(base))
        if base == 0:
            return self.format_scaled(0.0, suffix, 0)
        scaled = base / size
        digits = 0 if scaled == 0 else int(math.floor(math.log10(abs(scaled))))
        # Below the ladder's smallest rung the decimals grow, so three digits still show (a request
        # cost of $0.0000412 is not $0.0000); 12 places reach a picodollar, past that is zero.
        return self.format_scaled(scaled, suffix, max(0, min(12, 2 - digits)))


def _table() -> dict[str, Unit]:
    units: list[Unit] = []
    for id_, to_base in (("ns", 1e-9), ("µs", 1e-6), ("us", 1e-6), ("ms", 1e-3), ("s", 1.0),
                         ("m", 60.0), ("h", 3600.0), ("d", 86400.0)):
        units.append(Unit(id_, _TIME, to_base))
    for ids, ladder, base in (
        (("bytes", "kbytes", "mbytes", "gbytes", "tbytes"), _BYTES_IEC, 1024),
        (("decbytes", "deckbytes", "decmbytes", "decgbytes", "dectbytes"), _BYTES_SI, 1000),
        (("binBps", "KiBs", "MiBs", "GiBs", "TiBs"), _BYTES_IEC_RATE, 1024),
        (("Bps", "KBs", "MBs", "GBs", "TBs"), _BYTES_SI_RATE, 1000),
        (("bits", "kbits", "mbits", "gbits"), _BITS_SI, 1000),
        (("decbits", "deckbits", "decmbits", "decgbits"), _BITS_SI, 1000),
        (("bps", "Kbits", "Mbits", "Gbits", "Tbits"), _BITS_SI_RATE, 1000),
    ):
        units.extend(Unit(id_, ladder, float(base) ** i) for i, id_ in enumerate(ids))
    for id_, suffix in (("ops", "ops/s"), ("reqps", "req/s"), ("rps", "reads/s"), ("wps", "writes/s"),
                        ("iops", "io/s"), ("cps", "counts/s"), ("opm", "ops/min"), ("reqpm", "req/min"),
                        ("rpm", "reads/min"), ("wpm", "writes/min"), ("cpm", "counts/min")):
        units.append(Unit(id_, _count(suffix)))
    units += [Unit("percent", _PERCENT), Unit("percentunit", _PERCENT, 100.0)]
    for id_, symbol in (("currencyUSD", "$"), ("currencyEUR", "€"), ("currencyGBP", "£"), ("currencyJPY", "¥")):
        units.append(Unit(id_, _CURRENCY, prefix=symbol))
    units += [Unit("short"), Unit("none"), Unit("")]
    return {u.id: u for u in units}


_UNITS = _table()


def unit_for(unit_id: str) -> Unit:
    """The :class:`Unit` for a Grafana unit id; an unknown id reads as a plain number."""
    return _UNITS.get(unit_id) or Unit(unit_id, known=False)
