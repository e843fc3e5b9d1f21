"""Checks of Serve's typed options with the words of Ray's (pydantic) models, so a program sees Ray's message.

Ray validates DeploymentConfig and AutoscalingConfig with pydantic; its errors read

    1 validation error for DeploymentConfig
    num_replicas
      Input should be greater than or equal to 0 [type=greater_than_equal, input_value=-1, input_type=int]

ValidationError here is a ValueError with that text (pydantic's is a ValueError too), without pydantic's link to
its documentation. Pure functions; thread-safe.
"""

import math

_MAX_REPR = 50


class ValidationError(ValueError):
    """An option failed its check. `model` and `loc` name where; `kind` is pydantic's error type."""

    def __init__(self, model, loc, message, kind, value):
        self.model, self.loc, self.kind, self.value = model, loc, kind, value
        detail = f"{message} [type={kind}, input_value={_short_repr(value)}, input_type={type(value).__name__}]"
        lines = [f"1 validation error for {model}"]
        if loc:
            lines.append(loc)
        lines.append(f"  {detail}")
        super().__init__("\n".join(lines))


def _short_repr(value):
    text = repr(value)
    if len(text) > _MAX_REPR:
        text = text[:25] + "..." + text[-24:]
    return text


def to_int(model, loc, value):
    """`value` as pydantic's lax int: ints, bools, integral floats, and strings of an integer."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValidationError(model, loc, "Input should be a finite number", "finite_number", value)
        if value != int(value):
            raise ValidationError(model, loc, "Input should be a valid integer, got a number with a fractional part",
                                  "int_from_float", value)
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise ValidationError(model, loc, "Input should be a valid integer, unable to parse string as an integer",
                                  "int_parsing", value) from None
    raise ValidationError(model, loc, "Input should be a valid integer", "int_type", value)


def to_float(model, loc, value):
    """`value` as pydantic's lax float: numbers and strings of a number."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            raise ValidationError(model, loc, "Input should be a valid number, unable to parse string as a number",
                                  "float_parsing", value) from None
    raise ValidationError(model, loc, "Input should be a valid number", "float_type", value)


def bound(model, loc, number, original, ge=None, gt=None, le=None):
    if ge is not None and not number >= ge:
        raise ValidationError(model, loc, f"Input should be greater than or equal to {ge}", "greater_than_equal",
                              original)
    if gt is not None and not number > gt:
        raise ValidationError(model, loc, f"Input should be greater than {gt}", "greater_than", original)
    if le is not None and not number <= le:
        raise ValidationError(model, loc, f"Input should be less than or equal to {le}", "less_than_equal", original)
    return number


def int_field(model, loc, value, ge=None, gt=None, le=None):
    return bound(model, loc, to_int(model, loc, value), value, ge, gt, le)


def float_field(model, loc, value, ge=None, gt=None, le=None):
    return bound(model, loc, to_float(model, loc, value), value, ge, gt, le)


def value_error(model, loc, message, value):
    """A model validator's ValueError, as pydantic words it."""
    return ValidationError(model, loc, f"Value error, {message}", "value_error", value)
