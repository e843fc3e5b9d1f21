"""Validated configuration records: the pydantic-model surface of Ray's LLM configs, on dataclasses.

torus's SDK runs under Debian's python3, which has no pydantic, so the configs of torus.serve.llm are dataclasses
made with @record. A record is built from keyword arguments only; an unknown or missing field is a ValueError that
names the field and the accepted ones, and each class validates (and normalises) its values in __post_init__,
raising ValueError with the field's name. As pydantic models do, a record offers model_validate (a dict or an
instance), model_dump (nested records and enums as plain values), model_copy(update=...), parse_yaml and from_file.

Records are plain values: thread-safe to read; pickled as dataclasses (the validated state travels as it is).
"""

import copy
import dataclasses
import enum
import functools

import yaml


def record(cls):
    """Makes `cls` a dataclass whose constructor takes keyword arguments only and names unknown or missing fields."""
    cls = dataclasses.dataclass(cls)
    generated_init = cls.__init__
    fields = [f for f in dataclasses.fields(cls) if f.init]
    names = [f.name for f in fields]
    required = [f.name for f in fields
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]

    @functools.wraps(generated_init)
    def __init__(self, *args, **kwargs):
        if args:
            raise TypeError(f"{cls.__name__} takes keyword arguments only (fields: {', '.join(names)})")
        unknown = sorted(set(kwargs) - set(names))
        if unknown:
            raise ValueError(f"{cls.__name__}: unknown field{'s' if len(unknown) > 1 else ''} "
                             f"{', '.join(map(repr, unknown))}; accepted fields: {', '.join(names)}")
        missing = [name for name in required if name not in kwargs]
        if missing:
            raise ValueError(f"{cls.__name__}: field {missing[0]!r} is required")
        generated_init(self, **kwargs)

    cls.__init__ = __init__
    cls.model_fields = {f.name: f for f in fields}
    return cls


def _plain(value):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


class Record:
    """The pydantic-like methods every config record has (mixed into @record classes)."""

    @classmethod
    def model_validate(cls, value):
        """`value` (an instance, or a dict of its fields) as a validated instance of this class."""
        if isinstance(value, cls):
            return value
        if not isinstance(value, dict):
            raise ValueError(f"{cls.__name__}: expected a dict or a {cls.__name__}, got {type(value).__name__}")
        return cls(**value)

    def model_dump(self, exclude_none=False):
        """The record as a dict of plain values (nested records as dicts, enums as their values)."""
        dumped = _plain(self)
        if exclude_none:
            dumped = {k: v for k, v in dumped.items() if v is not None}
        return dumped

    def model_copy(self, update=None, deep=False):
        """A copy with the fields in `update` replaced (validated again)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}
        if deep:
            fields = copy.deepcopy(fields)
        fields.update(update or {})
        return type(self)(**fields)

    @classmethod
    def parse_yaml(cls, file, **kwargs):
        """A record from YAML text or an open YAML file."""
        kwargs.setdefault("Loader", yaml.SafeLoader)
        return cls.model_validate(yaml.load(file, **kwargs))

    @classmethod
    def from_file(cls, path, **kwargs):
        """A record from a YAML file's path."""
        with open(path, "r") as f:
            return cls.parse_yaml(f, **kwargs)


def check_type(owner, field, value, types, accepted):
    """Raises ValueError naming `owner.field` and `accepted` unless `value` is one of `types` (bool is no int)."""
    if isinstance(value, bool) and bool not in types:
        ok = False
    else:
        ok = isinstance(value, types)
    if not ok:
        raise ValueError(f"{owner}.{field}: expected {accepted}, got {value!r}")
    return value


def check_positive_int(owner, field, value):
    check_type(owner, field, value, (int,), "a positive integer")
    if value <= 0:
        raise ValueError(f"{owner}.{field}: expected a positive integer, got {value!r}")
    return value
