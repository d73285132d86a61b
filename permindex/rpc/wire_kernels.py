"""The compiled kernel that sizes a request from its wire bytes before anything parses them:
:func:`count_items` walks the top-level fields of a serialized protobuf message and counts the
items of its repeated fields, without the GIL, so that a request over the server's batch limit
is refused in a scan of its bytes instead of a parse that holds the GIL for seconds (the caller:
:class:`permindex.rpc.handlers.RequestReader`). Import only where the kernel is needed: it
imports numba.

Wire format (protobuf encoding): a message is a sequence of fields, each a varint tag
``(field number << 3) | wire type`` followed by a varint (type 0), 8 bytes (type 1), a varint
length and that many bytes (type 2) or 4 bytes (type 5). A repeated field appears once per item
(strings, messages, unpacked scalars) or once per run of items as a *packed* length-delimited
field: fixed64 items 8 bytes each, fixed32 4, varints one terminal byte (< 0x80) each.
"""

from __future__ import annotations

import numpy as np

from permindex.jit_numba import njit

__all__ = [
    "EACH",
    "NOT_COUNTED",
    "OK",
    "OVER_LIMIT",
    "PACKED_32",
    "PACKED_64",
    "PACKED_VARINT",
    "count_items",
    "oneof_conflict",
]

#: Kinds of a field number (the ``kinds`` array of :func:`count_items`).
NOT_COUNTED = 0  # not a repeated field: walked over, not counted
EACH = 1  # one item per occurrence (a repeated string, bytes or message, or unpacked scalar)
PACKED_64 = 2  # a packed run of fixed64 / sfixed64 / double: length / 8 items
PACKED_32 = 3  # a packed run of fixed32 / sfixed32 / float: length / 4 items
PACKED_VARINT = 4  # a packed run of varints: one item per byte below 0x80

#: What :func:`count_items` returns when it walked the whole message, and when it stopped at a
#: count over the limit (else: the position of bytes that are not protobuf).
OK = -1
OVER_LIMIT = -2


@njit(inline=True)
def _varint(data, pos):  # type: ignore[no-untyped-def]
    """(value, position after it) of the varint at ``pos``, the value's bits past 62 dropped
    (no tag, length or count here needs them); position -1 when it runs past the end or is
    longer than 10 bytes."""
    n = data.size
    value = 0
    shift = 0
    while shift < 70:
        if pos >= n:
            return 0, -1
        byte = np.int64(data[pos])
        pos += 1
        if shift < 63:
            value |= ((byte & 0x7F) << shift) & 0x7FFFFFFFFFFFFFFF
        if byte < 0x80:
            return value, pos
        shift += 7
    return 0, -1


@njit()
def count_items(data, kinds, counts, limit):  # type: ignore[no-untyped-def]
    """Count the items of the repeated top-level fields of the message ``data`` ((n,) uint8),
    field f's into ``counts[f]`` ((m,) int64, zeroed by the caller) as ``kinds[f]`` ((m,)
    uint8, one of the kinds above) says, and the occurrences of every other field (field
    numbers >= m, unknown fields included) into ``counts[0]``, stopping as soon as one count is
    above ``limit``.

    Returns:
        :data:`OK` (-1) when the whole message was walked; :data:`OVER_LIMIT` (-2) when a count
        went past ``limit`` (the scan stopped there); else the byte position of the first field
        that is not valid protobuf (a tag, varint or length running past the end, a varint over
        10 bytes, wire type 3, 4, 6 or 7, or field number 0).

    Nested messages are not entered. O(n) (O(limit) bytes on a request over the limit), without
    the GIL.
    """
    n = data.size
    m = kinds.size
    pos = 0
    while pos < n:
        start = pos
        if data[pos] < 0x80:  # a one-byte tag: fields 1 to 15, the common case
            tag = np.int64(data[pos])
            pos += 1
        else:
            tag, pos = _varint(data, pos)
            if pos < 0:
                return start
        number = tag >> 3
        wire = tag & 7
        if number == 0:
            return start
        kind = kinds[number] if number < m else 0
        if wire == 0:
            _, pos = _varint(data, pos)
            if pos < 0:
                return start
            if kind != 0:
                counts[number] += 1
        elif wire == 1 or wire == 5:
            pos += 8 if wire == 1 else 4
            if pos > n:
                return start
            if kind != 0:
                counts[number] += 1
        elif wire == 2:
            if pos < n and data[pos] < 0x80:  # a length below 128
                length = np.int64(data[pos])
                pos += 1
            else:
                length, pos = _varint(data, pos)
                if pos < 0:
                    return start
            if length > n - pos:
                return start
            end = pos + length
            if kind == EACH:
                counts[number] += 1
            elif kind == PACKED_64:
                counts[number] += length // 8
            elif kind == PACKED_32:
                counts[number] += length // 4
            elif kind == PACKED_VARINT:
                for i in range(pos, end):
                    if data[i] < 0x80:
                        counts[number] += 1
            pos = end
        else:
            return start
        if kind == 0:
            counts[0] += 1  # every field not counted as items: no request needs many
            if counts[0] > limit:
                return OVER_LIMIT
        elif counts[number] > limit:
            return OVER_LIMIT
    return OK


@njit(inline=True)
def _field_end(data, pos, wire, end):  # type: ignore[no-untyped-def]
    """The position after the value of a field of wire type ``wire`` starting at ``pos``,
    within ``data[:end]``; -1 when it runs past ``end`` or the wire type is not a value's."""
    if wire == 0:
        _, pos = _varint(data, pos)
    elif wire == 1 or wire == 5:
        pos += 8 if wire == 1 else 4
    elif wire == 2:
        length, pos = _varint(data, pos)
        if pos < 0 or length > end - pos:
            return -1
        pos += length
    else:
        return -1
    return pos if 0 <= pos <= end else -1


@njit()
def oneof_conflict(data, outer, members):  # type: ignore[no-untyped-def]
    """The byte position of the first submessage in the top-level field ``outer`` of the
    message ``data`` ((n,) uint8) that sets two fields of its oneof -- those whose number f has
    ``members[f]`` != 0 ((m,) uint8) -- or -1 when none does (or the bytes end early: the
    parser reports that). The parser would keep the last member without a word. O(n), without
    the GIL.
    """
    n = data.size
    m = members.size
    pos = 0
    while pos < n:
        tag, pos = _varint(data, pos)
        if pos < 0:
            return -1
        if tag >> 3 == outer and tag & 7 == 2:
            length, start = _varint(data, pos)
            if start < 0 or length > n - start:
                return -1
            end = start + length
            seen = 0
            inner = start
            while inner < end:
                inner_tag, inner = _varint(data, inner)
                if inner < 0:
                    return -1
                field = inner_tag >> 3
                if field < m and members[field] != 0:
                    seen += 1
                    if seen > 1:
                        return start
                inner = _field_end(data, inner, inner_tag & 7, end)
                if inner < 0:
                    return -1
            pos = end
        else:
            pos = _field_end(data, pos, tag & 7, n)
            if pos < 0:
                return -1
    return -1
