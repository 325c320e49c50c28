"""JSON decoding for whatever the API server sends: orjson, and for the rare document it refuses, a decoder of
our own that nests without limit.

The API server stores JSON nested up to 10,000 levels (a Job's payload, a Handler's unknown pod fields); orjson
stops at 1,024 and Python's json module at its recursion limit. One such object in a list page would make the
whole page, and so the whole namespace, unreadable. The fallback keeps its own stack (no recursion), so any
depth decodes; it is slow (pure Python), which only the rare deep document pays.
"""

from __future__ import annotations

import re
from json.decoder import scanstring
from typing import Any

import orjson

_SPACE = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_LITERALS = (("true", True), ("false", False), ("null", None))


def loads(data: bytes | str) -> Any:
    """The JSON value of data; ValueError (orjson.JSONDecodeError) when it is not JSON."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as first:
        try:
            return deep_loads(data.decode() if isinstance(data, bytes) else data)
        except (ValueError, IndexError):
            raise first from None


def deep_loads(text: str) -> Any:
    """Decode JSON text of any depth without recursion. ValueError when it is not JSON."""
    # Open containers, innermost last, each with the key its next value goes to (None in a list).
    open_: list[list[Any]] = []
    pos = _SPACE.match(text, 0).end()  # type: ignore[union-attr]
    while True:
        ch = text[pos:pos + 1]
        value: Any
        if ch == "{":
            pos = _SPACE.match(text, pos + 1).end()  # type: ignore[union-attr]
            if text[pos:pos + 1] == "}":
                value, pos = {}, pos + 1
            else:
                key, pos = _key(text, pos)
                open_.append([{}, key])
                pos = _SPACE.match(text, pos).end()  # type: ignore[union-attr]
                continue
        elif ch == "[":
            pos = _SPACE.match(text, pos + 1).end()  # type: ignore[union-attr]
            if text[pos:pos + 1] == "]":
                value, pos = [], pos + 1
            else:
                open_.append([[], None])
                continue
        elif ch == '"':
            value, pos = scanstring(text, pos + 1, True)
        else:
            for word, literal in _LITERALS:
                if text.startswith(word, pos):
                    value, pos = literal, pos + len(word)
                    break
            else:
                match = _NUMBER.match(text, pos)
                if match is None:
                    raise ValueError(f"unexpected {ch!r} at offset {pos}")
                number = match.group()
                value = float(number) if match.group(1) or match.group(2) else int(number)
                pos = match.end()
        # Put the value in its container; close every container that ends here.
        while True:
            pos = _SPACE.match(text, pos).end()  # type: ignore[union-attr]
            if not open_:
                if pos != len(text):
                    raise ValueError(f"extra data at offset {pos}")
                return value
            top = open_[-1]
            container = top[0]
            if top[1] is None:
                container.append(value)
            else:
                container[top[1]] = value
            ch = text[pos:pos + 1]
            if ch == ",":
                pos = _SPACE.match(text, pos + 1).end()  # type: ignore[union-attr]
                if top[1] is not None:
                    top[1], pos = _key(text, pos)
                    pos = _SPACE.match(text, pos).end()  # type: ignore[union-attr]
                break  # the next value of this container
            if ch != ("]" if top[1] is None else "}"):
                raise ValueError(f"expected ',' or a closing bracket at offset {pos}")
            pos += 1
            open_.pop()
            value = container


def _key(text: str, pos: int) -> tuple[str, int]:
    """A member's key and the position after its colon."""
    if text[pos:pos + 1] != '"':
        raise ValueError(f"expected a key at offset {pos}")
    key, pos = scanstring(text, pos + 1, True)
    pos = _SPACE.match(text, pos).end()  # type: ignore[union-attr]
    if text[pos:pos + 1] != ":":
        raise ValueError(f"expected ':' at offset {pos}")
    return key, pos + 1
