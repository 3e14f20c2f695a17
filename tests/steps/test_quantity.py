"""The one quantity reader: exact values, the API server's grammar, and the byte and core views."""

from __future__ import annotations

import itertools
import re
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from k8sjobs.steps.quantity import parse_bytes, parse_cores, parse_quantity

# The grammar of k8s.io/apimachinery's Quantity, written out from its BNF independently of the
# module under test. The exponent is an integer: the API server's parser takes no other.
_NUMBER = r"([0-9]+|[0-9]+\.[0-9]+|[0-9]+\.|\.[0-9]+)"
_SUFFIX = r"(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?"
_KUBERNETES = re.compile(rf"[+-]?{_NUMBER}{_SUFFIX}")
_MULTIPLIER = {
    "": Fraction(1),
    **{s: Fraction(1024) ** (i + 1) for i, s in enumerate(["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"])},
    **{s: Fraction(1000) ** (i - 3) for i, s in enumerate("num kMGTPE") if s != " "},
}

mantissas = st.integers(min_value=0, max_value=10**30)
scales = st.integers(min_value=0, max_value=12)
suffixes = st.sampled_from(sorted(_MULTIPLIER))


def _decimal_text(mantissa: int, scale: int) -> str:
    """Write mantissa / 10**scale in plain decimal notation (the test's formatter)."""
    digits = str(mantissa).rjust(scale + 1, "0")
    return digits if scale == 0 else f"{digits[:-scale]}.{digits[-scale:]}"


@given(mantissas, scales, suffixes, st.sampled_from(["", "+", "-"]))
def test_formatting_then_parsing_gives_the_exact_value(
    mantissa: int, scale: int, suffix: str, sign: str
) -> None:
    value = Fraction(mantissa, 10**scale) * _MULTIPLIER[suffix] * (-1 if sign == "-" else 1)
    assert parse_quantity(f"{sign}{_decimal_text(mantissa, scale)}{suffix}") == value


@given(mantissas, scales, st.integers(min_value=-30, max_value=30), st.sampled_from("eE"))
def test_an_exponent_scales_by_powers_of_ten(mantissa: int, scale: int, power: int, e: str) -> None:
    text = _decimal_text(mantissa, scale)
    assert parse_quantity(f"{text}{e}{power:+d}") == parse_quantity(text) * Fraction(10) ** power
    assert parse_quantity(f"{text}{e}{abs(power)}") == parse_quantity(text) * 10 ** abs(power)


@given(mantissas, scales)
def test_binary_and_decimal_suffixes_relate_as_1024_and_1000(mantissa: int, scale: int) -> None:
    text = _decimal_text(mantissa, scale)
    for smaller, larger in itertools.pairwise(["n", "u", "m", "", "k", "M", "G", "T", "P", "E"]):
        assert parse_quantity(text + larger) == 1000 * parse_quantity(text + smaller)
    for smaller, larger in itertools.pairwise(["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]):
        assert parse_quantity(text + larger) == 1024 * parse_quantity(text + smaller)
    assert parse_quantity(text + "k") == parse_quantity(text + "e3")
    assert parse_quantity(text + "Ki") - parse_quantity(text + "k") == 24 * parse_quantity(text)


@given(st.text(alphabet="0123456789.+-eEKMGTPinumkx ", max_size=12))
@example("1E")
@example("1e")
@example(".")
@example("1.")
@example(".5")
@example("1.1.M")
@example("0.1mi")
@example("+-1")
@example("5e-")
@example("1e1001")
def test_accepted_exactly_when_the_kubernetes_grammar_accepts(text: str) -> None:
    grammatical = _KUBERNETES.fullmatch(text.strip()) is not None
    exponent = re.search(r"[eE]([+-]?[0-9]+)$", text.strip())
    in_reach = exponent is None or abs(int(exponent[1])) <= 1000  # the documented limit
    try:
        parse_quantity(text)
    except ValueError as error:
        assert not (grammatical and in_reach), f"{text!r} was refused: {error}"
        assert f'"{text}" is not a Kubernetes quantity' in str(error)
    else:
        assert grammatical, f"{text!r} is no Kubernetes quantity but was accepted"


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_a_float_means_the_number_it_prints_as(number: float) -> None:
    assert parse_quantity(number) == Fraction(Decimal(repr(number)))
    assert parse_cores(number) == number


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1.5", Fraction(3, 2)),
        ("1.5Gi", 1536 * 2**20),
        ("0.9Gi", Fraction(9 * 2**30, 10)),
        ("0.30000000000000004", Fraction(30000000000000004, 10**17)),
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


@pytest.mark.parametrize("bad", [True, float("nan"), float("inf"), "1e1001", "1" * 300, "١٢"])
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
