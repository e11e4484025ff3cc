# SPDX-License-Identifier: MIT
"""Patterns read as ECMA-262, as JSON schema says, not as Python's ``regex`` reads them."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mp13_toolbox import validate
from mp13_toolbox._patterns import ecma_pattern


@pytest.mark.parametrize(
    ("pattern", "value", "ok"),
    [
        (r"^[a-z]+$", "abc", True),
        (r"^[a-z]+$", "abc\n", False),  # Python's $ also matches before a final newline
        (r"^\d+$", "123", True),
        (r"^\d+$", "١٢٣", False),  # ECMA-262 \d is ASCII; Python's takes any script's digits
        (r"^\w+$", "café", False),
        (r"^\W$", "é", True),
        (r"^\D$", "٣", True),
        (r"^[\d.]+$", "1.5", True),
        (r"^[\d.]+$", "١.٥", False),
        (r"^\$\d$", "$5", True),  # an escaped $ stays a dollar sign
        (r"^[$]$", "$", True),  # so does one in a class
        (r"^[]a]+$", "]a", True),  # a ] first in a class is literal
        (r"^[^]a]$", "b", True),
        (r"^a\\$", "a\\", True),  # an escaped backslash, then the end
        (r"b", "abc", True),  # searched, not anchored
    ],
)
def test_patterns_are_ecma_262_as_json_schema_says(pattern, value, ok):
    assert (validate({"pattern": pattern}, value)[1] == []) is ok


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="ab()|*+?[]^.-", max_size=12))
def test_patterns_without_dollars_escapes_or_classes_are_matched_as_written(pattern):
    assert ecma_pattern(pattern) == pattern


@pytest.mark.parametrize("index", ["²", "١", "0x1", "-1", "9"])
def test_a_ref_index_that_is_no_ascii_number_names_nothing(index):
    # "²".isdigit() is True but int("²") raises: that ValueError escaped validate() and
    # register_external's check.
    from mp13_toolbox._patterns import resolve_ref

    schema = {"anyOf": [{"type": "integer"}]}
    assert resolve_ref(schema, f"#/anyOf/{index}") is None
    assert resolve_ref(schema, "#/anyOf/0") == {"type": "integer"}


def test_the_public_resolver_follows_a_ref_through_any_mapping():
    # The engine's parsers hand it read-only schemas (MappingProxyType) as well as dicts.
    from types import MappingProxyType

    from mp13_toolbox import resolve_ref

    node = {"type": "object"}
    schema = {"$defs": MappingProxyType({"a/b": node, "~": [node]})}
    assert resolve_ref(schema, "#/$defs/a~1b") is node
    assert resolve_ref(schema, "#/$defs/~0/0") is node
    assert resolve_ref(schema, "#") is schema
    assert resolve_ref(schema, "#/$defs/missing") is None
    assert resolve_ref(schema, "other.json#/$defs/a~1b") is None
