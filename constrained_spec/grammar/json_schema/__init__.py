"""JSON Schema -> regex compiler.

Entry point: :func:`schema_to_regex` (options: :class:`SchemaOptions`; result:
:class:`SchemaRegex`).  :func:`value_regex` is the regex of one JSON value;
:func:`canonical_key_orders` the order in which the compiler emits properties.

Modules, by concern:

* :mod:`.options`: options, result, and the fixed limits;
* :mod:`.context`: where a subschema sits, ``$id``/``$ref`` resolution, the validator oracle;
* :mod:`.ir`: the intermediate form (:class:`~.ir.Flat`, one conjunction of subschemas);
* :mod:`.keywords`: keyword handlers that fill it; :mod:`.combinators`: ``oneOf``/``not``
  and disjointness;
* :mod:`.emit_value`, :mod:`.emit_number`, :mod:`.emit_string`, :mod:`.emit_array`,
  :mod:`.emit_object`: emitters per JSON type;
* :mod:`.regex_text` (regex text builders), :mod:`.regex_ops` (pattern AST helpers),
  :mod:`.values` (JSON values), :mod:`.py_regex` (linear-time pattern checks): pure helpers;
* :mod:`.base` and :mod:`.compiler`: the state shared by the parts, and the core that
  composes them.
"""

from constrained_spec.grammar.json_schema.compiler import schema_to_regex, value_regex
from constrained_spec.grammar.json_schema.emit_object import canonical_key_orders
from constrained_spec.grammar.json_schema.options import SchemaOptions, SchemaRegex

__all__ = ["SchemaOptions", "SchemaRegex", "schema_to_regex", "canonical_key_orders", "value_regex"]
