"""Kubernetes resource quantities ("500m", "4Gi", "1e9"), read exactly (pure, no I/O).

The one reader of quantities in the package: the models (memory per node), the local backend
(cores and bytes to reserve), the local pod runner (memory limits) and the fake cluster's
scheduler all call it, so "1.5Gi" means one number everywhere.

The grammar is the API server's (``k8s.io/apimachinery/pkg/api/resource``, ``Quantity``)::

    quantity     ::= signedNumber suffix
    signedNumber ::= number | ("+" | "-") number
    number       ::= digits | digits "." digits | digits "." | "." digits
    suffix       ::= "" | binarySI | decimalSI | ("e" | "E") signedInteger
    binarySI     ::= Ki | Mi | Gi | Ti | Pi | Ei                (powers of 1024)
    decimalSI    ::= n | u | m | k | M | G | T | P | E          (powers of 1000)

``n`` and ``u`` are not in the documented grammar but the API server's parser takes them, so
they are read here too. Values are kept exact (a ``Fraction``): "0.1" plus "0.2" is "0.3".
Surrounding whitespace is ignored, as the API server's JSON decoding trims it. Two limits the
grammar does not have keep a hostile value cheap to refuse: at most 256 characters and an
exponent within +-1000 (a real quantity stays within 2^63, about 1e19).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

__all__ = ["parse_bytes", "parse_cores", "parse_quantity"]

_MAX_LENGTH = 256
_MAX_EXPONENT = 1000
_GRAMMAR = re.compile(
    r"(?P<sign>[+-]?)(?P<whole>[0-9]*)(?:\.(?P<fraction>[0-9]*))?"
    r"(?:[eE](?P<exponent>[+-]?[0-9]+)|(?P<suffix>[KMGTPE]i|[numkMGTPE]))?",
    re.ASCII,
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}


def parse_quantity(value: str | int | float) -> Fraction:
    """Return the exact number a Kubernetes quantity stands for ("500m" -> 1/2, "2Ki" -> 2048).

    Raises ValueError, naming the value and what to write instead, for anything the API
    server would refuse (and for booleans, NaN and infinities).
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a Kubernetes quantity; write a number or a string")
    if isinstance(value, int):
        return Fraction(value)
    text = repr(value) if isinstance(value, float) else str(value).strip()
    match = _GRAMMAR.fullmatch(text) if len(text) <= _MAX_LENGTH else None
    if match is None or not (match["whole"] or match["fraction"]):
        raise ValueError(
            f'"{value}" is not a Kubernetes quantity; write a number with an optional suffix, '
            'such as "500m", "4Gi", "128M" or "1e9"'
        )
    return _value(match, value)


def _value(match: re.Match[str], value: object) -> Fraction:
    """Return the number a grammatical quantity's parts stand for."""
    fraction = match["fraction"] or ""
    number = Fraction(int((match["whole"] or "0") + fraction), 10 ** len(fraction))
    if match["sign"] == "-":
        number = -number
    if match["exponent"] is not None:
        exponent = int(match["exponent"])
        if abs(exponent) > _MAX_EXPONENT:
            raise ValueError(
                f'"{value}" is not a Kubernetes quantity this library reads: its exponent is '
                f"beyond +-{_MAX_EXPONENT}; write the value with a suffix such as Gi or E"
            )
        return number * Fraction(10) ** exponent
    suffix = match["suffix"] or ""
    return number * _BINARY.get(suffix, _DECIMAL.get(suffix, Fraction(1)))


# A size written with a byte unit ("1GB", "512 MiB", "2gb"): refused with the two ways to
# write it (Kubernetes takes no "B").
_BYTE_UNIT = re.compile(r"(?P<number>\d+(?:\.\d+)?)\s*(?P<prefix>[KMGTPE])i?B", re.IGNORECASE)
_POWERS = {"K": 10, "M": 20, "G": 30, "T": 40, "P": 50, "E": 60}


def parse_bytes(value: str | int) -> int:
    """Return the bytes a memory quantity stands for ("4Gi", "500M", 1024), rounded up.

    Rounding up is what the API server's ``Value()`` does with a fraction of a byte. The milli,
    micro and nano suffixes are refused: "1m" for memory is almost always a mistaken "1M".
    """
    hint = 'write "12Gi" or a number of bytes'
    unit = _BYTE_UNIT.fullmatch(value.strip()) if isinstance(value, str) else None
    if unit is not None:  # "1GB", "512MiB", "2 gb": what people write for bytes elsewhere
        number, prefix = unit["number"], unit["prefix"].upper()
        decimal = "k" if prefix == "K" else prefix  # Kubernetes spells kilo "k", kibi "Ki"
        raise ValueError(
            f'"{value}" is not a Kubernetes quantity (it takes no "B"); write '
            f'"{number}{prefix}i" for {number} x 2^{_POWERS[prefix]} bytes, or '
            f'"{number}{decimal}" for {number} x 10^{_POWERS[prefix] * 3 // 10} bytes'
        )
    if isinstance(value, str) and value.strip()[-1:] in ("m", "u", "n"):
        raise ValueError(
            f'"{value}" is not a Kubernetes quantity of bytes: "{value.strip()[-1]}" means '
            f'thousandths or less (write "M" for megabytes); {hint}'
        )
    try:
        number = parse_quantity(value)
    except ValueError:
        raise ValueError(f'"{value}" is not a Kubernetes quantity; {hint}') from None
    if number < 0:
        raise ValueError(
            f'"{value}" is not a quantity of bytes (it is negative), so not a Kubernetes '
            f"quantity of memory; {hint}"
        )
    return math.ceil(number)


def parse_cores(value: str | int | float) -> float:
    """Return the CPU cores a quantity stands for ("2" -> 2.0, "500m" -> 0.5, 1.5 -> 1.5)."""
    return float(parse_quantity(value))
