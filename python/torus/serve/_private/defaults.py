"""Ray's marker of an option not given (ray.serve._private.utils.DEFAULT): `DEFAULT.VALUE` tells "left as it is"
apart from None, which some options take as a value."""

from enum import Enum
from typing import TypeVar, Union

T = TypeVar("T")


class DEFAULT(Enum):
    VALUE = 1


Default = Union[DEFAULT, T]
