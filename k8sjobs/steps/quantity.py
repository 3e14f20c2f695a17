"""Kubernetes resource quantities ("500m", "4Gi", "1e9"), read as the API server reads them.

The one reader of quantities in the package: the models (memory per node), the local backend
(cores and bytes to reserve), the local pod runner (memory limits) and the whole fake cluster
(its decoding, validation, admission, quota and scheduler) call it, so "1.5Gi" means one number
everywhere, and what kube-apiserver refuses is refused here with its words.

`Quantity.read` is ``resource.ParseQuantity`` of k8s.io/apimachinery, rule for rule::

    quantity ::= [+-] digits* [. digits*] suffix        (one digit at least, see below)
    suffix   ::= "" | n | u | m | k | M | G | T | P | E  (powers of 1000: DecimalSI)
               | Ki | Mi | Gi | Ti | Pi | Ei             (powers of 1024: BinarySI)
               | (e | E) [+-] digits                     (powers of ten: DecimalExponent)

Anything else is refused with the real parser's error: ``quantities must match the regular
expression '...'`` when the text is not of the shape ``^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?
[0-9]*)$`` read left to right, ``unable to parse quantity's suffix`` for a suffix outside the
three lists ("1ki", "1e", "1e+"), ``unable to parse numeric part of quantity`` for a number
without digits the slow path cannot read. The real parser's quirks are kept: a number without
digits before a suffix ("m", "Ki", "+") is zero; an exponent wraps at 32 bits; a value below
10^-9 in magnitude rounds up to 1n; a binary value is capped at 2^63-1.

Values are kept exact (a ``Fraction``), and ``str()`` is the canonical form the API server
writes back ("1.5Gi" -> "1536Mi", "0.5" -> "500m"). Two limits the real parser lacks keep a
hostile value cheap to refuse: at most 256 characters and an exponent within +-1000 (a real
quantity stays within 2^63, about 1e19).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

__all__ = [
    "FORMAT_WRONG",
    "NUMERIC",
    "SUFFIX",
    "Quantity",
    "QuantityError",
    "parse_bytes",
    "parse_cores",
    "parse_quantity",
]

# The real parser's three errors, word for word (k8s.io/apimachinery/pkg/api/resource).
FORMAT_WRONG = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
NUMERIC = "unable to parse numeric part of quantity"
SUFFIX = "unable to parse quantity's suffix"

_MAX_LENGTH = 256
_MAX_EXPONENT = 1000
_MAX_BINARY = 2**63 - 1  # the cap on a BinarySI value (maxAllowed)
_NANO = Fraction(1, 10**9)
# The real scanner, left to right: sign, leading zeros, digits, "." and digits, then suffix
# letters, a sign and digits. Not matching is FORMAT_WRONG.
_SHAPE = re.compile(
    r"(?P<sign>[+-]?)0*(?P<num>[0-9]*)(?P<dot>\.(?P<denom>[0-9]*))?"
    r"(?P<suffix>[eEinumkKMGTP]*[+-]?[0-9]*)",
    re.ASCII,
)
_SIGNED_INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL_SUFFIXES = {exponent: suffix for suffix, exponent in _DECIMAL.items()}
_GO_FORMATS = {"decimal": "DecimalSI", "binary": "BinarySI", "exponent": "DecimalExponent"}
# What Go's strings.TrimSpace takes off a quantity that JSON carries unescaped: the space and
# Unicode's other spaces (a tab or newline arrives escaped, "\t", and is refused).
_JSON_SPACE = " \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
_JSON_SPACE += "\u2028\u2029\u202f\u205f\u3000"


class QuantityError(ValueError):
    """A text that is no quantity; `reason` is what kube-apiserver says of it."""

    def __init__(self, text: str, reason: str) -> None:
        super().__init__(f'"{text}" is not a Kubernetes quantity: {reason}')
        self.text = text
        self.reason = reason


@dataclass(frozen=True)
class Quantity:
    """An exact quantity, the format it prints in (binary, decimal or exponent) and, when
    the real parser would hold it as an int64 mantissa and a power of ten, those two."""

    value: Fraction
    format: str = "decimal"
    amount: tuple[int, int] | None = field(default=None, compare=False)

    @classmethod
    def read(cls, text: str) -> Quantity:
        """Return the quantity `text` stands for as ``resource.ParseQuantity`` reads it;
        raise QuantityError with the real parser's words when it is none."""
        if not text:
            raise QuantityError(text, FORMAT_WRONG)
        if text == "0":
            return cls(Fraction(0), "decimal", (0, 0))
        if len(text) > _MAX_LENGTH:
            raise QuantityError(text, f"longer than {_MAX_LENGTH} characters (a limit of the fake)")
        shape = _SHAPE.fullmatch(text)
        if shape is None:
            raise QuantityError(text, FORMAT_WRONG)
        base, exponent, kind = _interpret(text, shape["suffix"])
        fast = _fast(shape, base, exponent, kind)
        if fast is not None:
            return fast
        return _slow(text, shape, base, exponent, kind)

    @classmethod
    def parse(cls, value: Any) -> Quantity:
        """Return the quantity a JSON value stands for, as the API server decodes it: a
        string without its surrounding spaces, a number as written; raise QuantityError."""
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise QuantityError(str(value), FORMAT_WRONG)
        if isinstance(value, float):
            return cls.read(repr(value))
        return cls.read(str(value).strip(_JSON_SPACE))

    def __add__(self, other: Quantity) -> Quantity:
        return Quantity(self.value + other.value, self.format)  # Go keeps the left format

    def __str__(self) -> str:
        value, kind = self.value, self.format
        if kind == "binary" and (abs(value) < 1024 or value.denominator != 1):
            kind = "decimal"  # as Go's CanonicalizeBytes: small or fractional -> decimal
        if kind == "binary":
            number, power = int(value), 0
            while number and number % 1024 == 0 and power < len(_BINARY_SUFFIXES) - 1:
                number, power = number // 1024, power + 1
            return f"{number}{_BINARY_SUFFIXES[power]}"
        nanos = math.ceil(value * 10**9)  # rounded up to the smallest unit, as Go does
        if nanos == 0:
            return "0"
        exponent = -9
        while nanos % 1000 == 0:
            nanos, exponent = nanos // 1000, exponent + 3
        if kind == "exponent" or exponent > 18:  # past "E" Go falls back to an exponent
            return f"{nanos}e{exponent}" if exponent else str(nanos)
        return f"{nanos}{_DECIMAL_SUFFIXES[exponent]}"

    def go_syntax(self) -> str:
        """Return the quantity as Go's %#v prints a ``resource.Quantity`` value, which is how
        a field error of the real validation shows one ("Invalid value: resource.Quantity{...")."""
        if self.amount is not None:
            mantissa, scale = self.amount
            inner = f"i:resource.int64Amount{{value:{mantissa}, scale:{scale}}}, "
            inner += "d:resource.infDecAmount{Dec:(*inf.Dec)(nil)}"
        else:  # the real one prints a heap address here
            inner = "i:resource.int64Amount{value:0, scale:0}, "
            inner += "d:resource.infDecAmount{Dec:(*inf.Dec)(0xc000000000)}"
        return f'resource.Quantity{{{inner}, s:"{self}", Format:"{_GO_FORMATS[self.format]}"}}'


def _interpret(text: str, suffix: str) -> tuple[int, int, str]:
    """Return the base, exponent and format a suffix stands for (the real suffixer's)."""
    if suffix in _DECIMAL:
        return 10, _DECIMAL[suffix], "decimal"
    if suffix in _BINARY:
        return 2, _BINARY[suffix], "binary"
    if len(suffix) > 1 and suffix[0] in "eE" and _SIGNED_INTEGER.fullmatch(suffix[1:]):
        parsed = int(suffix[1:])
        if -(2**63) <= parsed < 2**63:  # strconv.ParseInt's range, then int32() wraps
            exponent = (parsed + 2**31) % 2**32 - 2**31
            if abs(exponent) > _MAX_EXPONENT:
                reason = f"its exponent is beyond +-{_MAX_EXPONENT} (a limit of the fake)"
                raise QuantityError(text, reason)
            return 10, exponent, "exponent"
    raise QuantityError(text, SUFFIX)


def _fast(shape: re.Match[str], base: int, exponent: int, kind: str) -> Quantity | None:
    """Return the quantity when the real parser's int64 path holds it exactly, else None."""
    num, denom = shape["num"] or "0", shape["denom"] or ""
    mantissa, scale = 1, 0
    if base == 10:
        scale, precision = exponent, 18 - len(num) - len(denom)
    elif not denom:
        mantissa = 1 << exponent
        precision = 15 - len(num) - exponent * 3 // 10 - 1
    else:
        precision = -1
    scale -= len(denom)
    if precision < 0 or scale < -9:
        return None
    result = int(num + denom) * mantissa
    if result >= 2**63:
        return None
    if shape["sign"] == "-":
        result = -result
    return Quantity(result * Fraction(10) ** scale, kind, (result, scale))


def _slow(text: str, shape: re.Match[str], base: int, exponent: int, kind: str) -> Quantity:
    """Return the quantity by the real parser's arbitrary-precision path."""
    num, denom = shape["num"], shape["denom"] or ""
    if not (num or denom) and "0" not in text[: shape.start("suffix")]:
        raise QuantityError(text, NUMERIC)  # inf.Dec reads no digit
    magnitude = Fraction(int(num + denom or "0"), 10 ** len(denom))
    magnitude *= Fraction(base) ** exponent
    if magnitude:
        magnitude = math.ceil(magnitude / _NANO) * _NANO  # rounded up to 1n, never to zero
    if kind == "binary" and magnitude > _MAX_BINARY:
        magnitude = Fraction(_MAX_BINARY)
    if kind == "binary" and 0 < magnitude < 1:
        kind = "decimal"
    return Quantity(-magnitude if shape["sign"] == "-" else magnitude, kind)


def parse_quantity(value: str | int | float) -> Fraction:
    """Return the exact number a Kubernetes quantity stands for ("500m" -> 1/2, "2Ki" -> 2048).

    Raises ValueError, naming the value and what to write instead, for anything the API
    server would refuse (and for booleans, NaN and infinities). Stricter than the API server
    in one way: a number without digits ("m", "Ki", "."), which it reads as zero, is refused
    as the slip it always is.
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a Kubernetes quantity; write a number or a string")
    if isinstance(value, int):
        return Fraction(value)
    text = repr(value) if isinstance(value, float) else str(value).strip()
    shape = _SHAPE.fullmatch(text)
    try:
        if shape is not None and not any(c.isdigit() for c in text[: shape.start("suffix")]):
            raise QuantityError(text, "its number has no digits")
        return Quantity.read(text).value
    except QuantityError as error:
        raise ValueError(
            f'"{value}" is not a Kubernetes quantity ({error.reason}); write a number with an '
            'optional suffix, such as "500m", "4Gi", "128M" or "1e9"'
        ) from None


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
