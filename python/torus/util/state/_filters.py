"""Filters of a list query, applied as Ray's API server applies them.

A filter is (column, "=" or "!=", value); columns are matched lower-cased and must be filterable in the record's
schema. A string value given for an int, float or bool column is converted first ("true"/"1", "false"/"0" for
bools); strings compare without regard to case. Bad filters raise ValueError with Ray's words (the caller turns it
into the API's error).

    rows = apply([{"state": "ALIVE", ...}], [("state", "=", "alive")], ActorState, detail=False)
"""

_TRUE = ("True", "true", "1")
_FALSE = ("False", "false", "0")


def to_type(value, kind):
    """`value` as `kind` (int, float or bool); ValueError when it cannot be."""
    if value is None or type(value) is kind:
        return value
    try:
        if kind is bool:
            if value in _TRUE:
                return True
            if value in _FALSE:
                return False
            raise ValueError
        return kind(value)
    except (TypeError, ValueError):
        raise ValueError(f"Failed to convert a value {value} of type {type(value)} to {kind}") from None


def _typed(filters, types):
    out = []
    for column, predicate, value in filters:
        kind = types.get(column)
        if kind in (int, float, bool) and not isinstance(value, kind):
            try:
                value = to_type(value, kind)
            except ValueError:
                if kind is bool:
                    raise ValueError(f"Invalid filter `--filter {column} {value}` for a boolean type column. "
                                     f"Please provide `--filter {column} [True|true|1]` for True or "
                                     f"`--filter {column} [False|false|0]` for False.") from None
                what = "int" if kind is int else "float"
                raise ValueError(f"Invalid filter `--filter {column} {value}` for a {what} type column. Please "
                                 f"provide an integer filter `--filter {column} [{what}]`") from None
        out.append((column, predicate, value))
    return out


def _equal(have, want):
    if isinstance(want, str) and isinstance(have, str):
        return have.lower() == want.lower()
    if isinstance(want, str) and isinstance(have, bool):
        return have == to_type(want, bool)
    if isinstance(want, str) and isinstance(have, int):
        return have == to_type(want, int)
    return have == want


def _matches(row, filters, filterable):
    for column, predicate, value in filters:
        column = column.lower()
        if column not in filterable:
            raise ValueError(f"The given filter column {column} is not supported. Enter filters with "
                             f"–-filter key=value or –-filter key!=value Supported filter columns: {filterable}")
        if column not in row:
            return False
        have = row[column]
        if predicate == "=":
            ok = _equal(have, value)
        elif predicate == "!=":
            ok = have.lower() != value.lower() if isinstance(have, str) and isinstance(value, str) else have != value
        else:
            raise ValueError(f"Unsupported filter predicate {predicate} is given. Available predicates: =, !=.")
        if not ok:
            return False
    return True


def apply(rows, filters, schema, detail):
    """The rows that pass every filter, each cut to the schema's columns (detail ones too when `detail`)."""
    filters = _typed(filters, schema.column_types())
    filterable = schema.filterable_columns()
    columns = schema.list_columns(detail=detail)
    return [{c: row.get(c) for c in columns} for row in rows if _matches(row, filters, filterable)]
