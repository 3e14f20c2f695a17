"""The one quantity reader: resource.Quantity's grammar and quirks, its words for what it
refuses, exact values rounded as the API server rounds them, canonical forms that round-trip,
and the byte and core views."""

from __future__ import annotations

import itertools
import math
import re
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from k8sjobs.steps.quantity import (
    FORMAT_WRONG,
    NUMERIC,
    SUFFIX,
    Quantity,
    QuantityError,
    parse_bytes,
    parse_cores,
    parse_quantity,
)

# The API server's rules, written out independently of the module under test: its regular
# expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$' read left to right (a sign,
# digits, one "." and digits, then the suffix letters, a sign and digits), and its suffix
# rules: one of the SI suffixes, or e/E and a signed 64-bit integer (wrapped to 32 bits).
_SHAPE = re.compile(r"[+-]?(?P<number>[0-9]*(?:\.[0-9]*)?)(?P<suffix>[eEinumkKMGTP]*[-+]?[0-9]*)")
_MULTIPLIER = {
    "": Fraction(1),
    **{s: Fraction(1024) ** (i + 1) for i, s in enumerate(["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"])},
    **{s: Fraction(1000) ** (i - 3) for i, s in enumerate("num kMGTPE") if s != " "},
}
_NANO = Fraction(1, 10**9)
_CAP = 2**63 - 1  # a BinarySI value is capped here


def _exponent(suffix: str) -> int | None:
    """Return the power of ten an e/E suffix stands for, as Go's ParseInt then int32() read it."""
    if not re.fullmatch(r"[eE][+-]?[0-9]+", suffix) or not -(2**63) <= int(suffix[1:]) < 2**63:
        return None
    return (int(suffix[1:]) + 2**31) % 2**32 - 2**31


def _held(exact: Fraction, binary: bool) -> Fraction:
    """Return what the API server holds for an exact value: rounded away from zero to 1n,
    and a binary one capped at 2^63-1."""
    magnitude = math.ceil(abs(exact) / _NANO) * _NANO
    if binary:
        magnitude = min(magnitude, Fraction(_CAP))
    return magnitude if exact >= 0 else -magnitude


mantissas = st.integers(min_value=0, max_value=10**30)
scales = st.integers(min_value=0, max_value=12)
suffixes = st.sampled_from(sorted(_MULTIPLIER))


def _decimal_text(mantissa: int, scale: int) -> str:
    """Write mantissa / 10**scale in plain decimal notation (the test's formatter)."""
    digits = str(mantissa).rjust(scale + 1, "0")
    return digits if scale == 0 else f"{digits[:-scale]}.{digits[-scale:]}"


@given(mantissas, scales, suffixes, st.sampled_from(["", "+", "-"]))
def test_formatting_then_parsing_gives_the_value_the_server_holds(
    mantissa: int, scale: int, suffix: str, sign: str
) -> None:
    exact = Fraction(mantissa, 10**scale) * _MULTIPLIER[suffix] * (-1 if sign == "-" else 1)
    held = _held(exact, suffix.endswith("i"))
    assert parse_quantity(f"{sign}{_decimal_text(mantissa, scale)}{suffix}") == held


@given(mantissas, scales, st.integers(min_value=-30, max_value=30), st.sampled_from("eE"))
def test_an_exponent_scales_by_powers_of_ten(mantissa: int, scale: int, power: int, e: str) -> None:
    text = _decimal_text(mantissa, scale)
    exact = Fraction(mantissa, 10**scale) * Fraction(10) ** power
    assert parse_quantity(f"{text}{e}{power:+d}") == _held(exact, False)
    positive = Fraction(mantissa, 10**scale) * 10 ** abs(power)
    assert parse_quantity(f"{text}{e}{abs(power)}") == _held(positive, False)


@given(st.integers(min_value=0, max_value=10**6), st.integers(min_value=0, max_value=6))
def test_binary_and_decimal_suffixes_relate_as_1024_and_1000(mantissa: int, scale: int) -> None:
    text = _decimal_text(mantissa, scale)  # within 1m steps and the binary cap: exact
    for smaller, larger in itertools.pairwise(["m", "", "k", "M", "G", "T", "P", "E"]):
        assert parse_quantity(text + larger) == 1000 * parse_quantity(text + smaller)
    for smaller, larger in itertools.pairwise(["", "Ki", "Mi", "Gi", "Ti"]):
        assert parse_quantity(text + larger) == 1024 * parse_quantity(text + smaller)
    assert parse_quantity(text + "k") == parse_quantity(text + "e3")
    assert parse_quantity(text + "Ki") - parse_quantity(text + "k") == 24 * parse_quantity(text)


@given(st.text(alphabet="0123456789.+-eEKMGTPinumkxb ", max_size=12))
@example("1E")
@example("1e")
@example("e5")
@example(".")
@example("1.")
@example(".5")
@example("1.1.M")
@example("0.1mi")
@example("+-1")
@example("5e-")
@example("1e+")
@example("1e1001")
@example("1e4294967296")
@example("1Gb")
@example("0x10")
@example("lots")
@example("Pi")
@example("e-10")
def test_accepted_exactly_when_the_regex_and_suffix_rules_accept(text: str) -> None:
    shape = _SHAPE.fullmatch(text)
    suffix = shape["suffix"] if shape else ""
    exponent = _exponent(suffix)
    grammatical = bool(text) and shape is not None
    suffixed = suffix in _MULTIPLIER or exponent is not None
    in_reach = exponent is None or abs(exponent) <= 1000  # the documented limit of the fake
    digits = shape is not None and any(c.isdigit() for c in shape["number"])
    try:
        quantity = Quantity.read(text)
    except QuantityError as error:
        if not grammatical:
            assert error.reason == FORMAT_WRONG
        elif not suffixed:
            assert error.reason == SUFFIX
        elif in_reach:  # a number without digits the slow path cannot read ("Pi", "e-10")
            assert (error.reason, digits) == (NUMERIC, False), text
        assert str(error).startswith(f'"{text}" is not a Kubernetes quantity: ')
        return
    assert grammatical and suffixed and in_reach, f"{text!r} was accepted"
    assert shape is not None
    if not digits:  # "m", "Ki", "+", ".": the server reads zero
        assert quantity.value == 0
        return
    number = shape["number"]
    whole, _, fraction = number.partition(".")
    exact = Fraction(
        int(whole or "0") * 10 ** len(fraction) + int(fraction or "0"), 10 ** len(fraction)
    )
    exact *= _MULTIPLIER[suffix] if exponent is None else Fraction(10) ** exponent
    assert quantity.value == _held(-exact if text.startswith("-") else exact, suffix.endswith("i"))


@given(st.text(alphabet="0123456789.+-eEKMGTPinumk", max_size=14))
def test_a_canonical_form_reads_back_to_itself(text: str) -> None:
    try:
        quantity = Quantity.read(text)
    except QuantityError:
        return
    canonical = str(quantity)
    again = Quantity.read(canonical)
    assert again.value == quantity.value
    assert str(again) == canonical


@pytest.mark.parametrize(
    ("text", "canonical", "go_format"),
    [
        ("1.5Gi", "1536Mi", "BinarySI"),
        ("1024Mi", "1Gi", "BinarySI"),
        ("0.5Ki", "512", "BinarySI"),
        ("1000m", "1", "DecimalSI"),
        ("0.5", "500m", "DecimalSI"),
        ("1e3", "1e3", "DecimalExponent"),
        ("1e-10", "1e-9", "DecimalExponent"),
        ("1000E", "1e21", "DecimalSI"),
        ("16Ei", "9223372036854775807", "BinarySI"),
        ("m", "0", "DecimalSI"),
    ],
)
def test_canonical_forms_are_the_api_servers(text: str, canonical: str, go_format: str) -> None:
    quantity = Quantity.read(text)
    assert str(quantity) == canonical
    assert f'Format:"{go_format}"' in quantity.go_syntax()


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_a_float_means_the_number_it_prints_as(number: float) -> None:
    held = _held(Fraction(Decimal(repr(number))), False)
    assert parse_quantity(number) == held
    assert parse_cores(number) == float(held)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1.5", Fraction(3, 2)),
        ("1.5Gi", 1536 * 2**20),
        ("0.9Gi", Fraction(9 * 2**30, 10)),
        ("0.30000000000000004", Fraction(300000001, 10**9)),  # rounded up to 1n, as the server
        ("500m", Fraction(1, 2)),
        ("100n", Fraction(1, 10**7)),
        ("1E", 10**18),
        ("1E3", 1000),
        ("  2Ki\n", 2048),
        (7, 7),
    ],
)
def test_documented_examples(text: str | int, value: Fraction) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    "bad", [True, float("nan"), float("inf"), "1e1001", "1" * 300, "١٢", "m", "Ki", "."]
)
def test_values_beyond_reach_are_refused_with_the_fix(bad: object) -> None:
    with pytest.raises(ValueError, match="not a Kubernetes quantity") as caught:
        parse_quantity(bad)  # type: ignore[arg-type]
    assert "write" in str(caught.value)


@given(mantissas, scales, st.sampled_from(["", "k", "Ki", "M", "Mi", "Gi", "E", "e3", "e-2"]))
def test_bytes_are_the_value_rounded_up(mantissa: int, scale: int, suffix: str) -> None:
    text = _decimal_text(mantissa, scale) + suffix
    exact = parse_quantity(text)
    assert parse_bytes(text) - 1 < exact <= parse_bytes(text)


@pytest.mark.parametrize("bad", ["1m", "500u", "2n", "-1", "-1Gi", -1])
def test_bytes_refuse_fractions_of_a_byte_by_suffix_and_negatives(bad: str | int) -> None:
    with pytest.raises(ValueError, match=r"not a quantity of bytes|of bytes:"):
        parse_bytes(bad)


def test_cores_read_millis_and_plain_numbers() -> None:
    assert [parse_cores(q) for q in ("2", "500m", "1.5", 3, "250m")] == [2.0, 0.5, 1.5, 3.0, 0.25]
