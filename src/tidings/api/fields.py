"""The rules of ``tidings.core.keys`` for every string the API takes, as pydantic markers.

A body field, a path or a query parameter puts one marker beside its own bounds::

    customer_id: Annotated[str, Field(min_length=1, max_length=200), KEY]
    channel: Annotated[str, Path(min_length=1, max_length=200), TEXT]

``TEXT`` refuses what no store can hold (``check_text``: NUL, lone surrogates), ``KEY``
what no delivery key may hold (``validate_key``: also whitespace and control
characters). Template data is checked with ``check_json_text`` where it is read, so
the error names the very key inside it. The refusal is a 422 in the API's one error
shape, naming the field (the validation handler of ``tidings.api.errors`` reports its
location), never a 503 from the store that could not hold it.
"""

from __future__ import annotations

from pydantic import AfterValidator
from pydantic_core import PydanticCustomError

from tidings.core.errors import InvalidInput
from tidings.core.keys import check_line, check_text, validate_key

__all__ = ["KEY", "LINE", "TEXT"]


def _refused(exc: InvalidInput) -> PydanticCustomError:
    # The message alone: the location of the error already names the field. Passed as
    # context, not as the template, so braces in it are never read as placeholders.
    return PydanticCustomError("unstorable_text", "{reason}", {"reason": exc.message})


def _text(value: str) -> str:
    try:
        return check_text(value, "value")
    except InvalidInput as exc:
        raise _refused(exc) from None


def _line(value: str) -> str:
    try:
        return check_line(value, "value")
    except InvalidInput as exc:
        raise _refused(exc) from None


def _key(value: str) -> str:
    try:
        return validate_key(value, "value")
    except InvalidInput as exc:
        raise _refused(exc) from None


TEXT = AfterValidator(_text)
"""A string every store can hold."""
KEY = AfterValidator(_key)
"""A string that can be (part of) a delivery key."""
LINE = AfterValidator(_line)
"""One line an operator writes (a reason, a note): no control character, 500 at most."""
