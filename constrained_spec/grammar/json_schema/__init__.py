"""JSON Schema -> regex compiler (see :mod:`constrained_spec.grammar.json_schema.compiler`)."""

from constrained_spec.grammar.json_schema.compiler import (
    SchemaOptions,
    SchemaRegex,
    canonical_key_orders,
    schema_to_regex,
    value_regex,
)

__all__ = ["SchemaOptions", "SchemaRegex", "schema_to_regex", "canonical_key_orders", "value_regex"]
