"""MkDocs hook (``hooks:`` in mkdocs.yml): the generated reference pages.

Two markers are replaced when a page's Markdown is read:

- ``<!-- generated: cli -->``: every ``permindex`` subcommand, from the argparse parser itself
  (:func:`permindex.cli.build_parser`): its usage, description, options per group (with their
  defaults, as ``--help`` expands them) and any notes of its own (``serve``'s configuration
  table); the exit codes once, from the top-level parser.
- ``<!-- generated: grpc -->``: the gRPC API from ``protos/permindex/v1/*.proto``: the file's
  header comment, each service's RPCs, each message's fields and each enum's values, with the
  comments written above them. The .proto is read as text (no protoc needed).

So neither page can drift from the code: both are made again on every ``mkdocs build``.
"""

from __future__ import annotations

import argparse
import html
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLI_MARKER = "<!-- generated: cli -->"
GRPC_MARKER = "<!-- generated: grpc -->"
REPO = Path(__file__).resolve().parent.parent.parent
PROTOS = REPO / "protos" / "permindex" / "v1"


#: A Sphinx cross-reference role as the docstrings write them (``:func:`simhash```,
#: ``:class:`~permindex.index.Index```), once mkdocstrings has rendered it: the role's name
#: before a ``<code>`` element.
_ROLE = re.compile(
    r":(?:py:)?(?:func|class|meth|mod|data|attr|exc|obj|const):(<code>)(~?)([^<]*)(</code>)"
)


def _role(found: re.Match[str]) -> str:
    name = found[3].rsplit(".", 1)[-1] if found[2] else found[3]
    return f"{found[1]}{name}{found[4]}"


def on_page_content(html_text: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs event: the docstrings' Sphinx roles shown as plain code (``:func:`x``` as ``x``,
    ``:class:`~a.b.C``` as ``C``), as Sphinx would show them."""
    return _ROLE.sub(_role, html_text)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs event: the markers of ``markdown`` replaced by the generated references."""
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    if GRPC_MARKER in markdown:
        markdown = markdown.replace(GRPC_MARKER, grpc_reference())
    return markdown


# --------------------------------------------------------------------------------------------
# The command line


def _cell(text: str) -> str:
    """``text`` as one Markdown table cell: one line, HTML and pipes escaped."""
    return html.escape(" ".join(text.split()), quote=False).replace("|", "\\|")


def _text_block(text: str) -> str:
    return f"```text\n{text.rstrip()}\n```\n"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _option_rows(parser: argparse.ArgumentParser) -> list[tuple[str, list[tuple[str, str]]]]:
    """(group title, [(option, help)]) for each group of ``parser`` that has options."""
    formatter = parser._get_formatter()
    groups = []
    for group in parser._action_groups:
        rows = []
        for action in group._group_actions:
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
                continue
            if action.option_strings:
                name = ", ".join(action.option_strings)
                if action.nargs != 0:
                    name += " " + formatter._format_args(action, action.dest.upper())
            else:
                name = formatter._format_args(action, action.dest)
            helped = formatter._expand_help(action) if action.help else ""
            if action.choices and not action.option_strings and not helped:
                helped = "one of: " + ", ".join(str(choice) for choice in action.choices)
            rows.append((name, helped))
        if rows:
            groups.append((group.title or "options", rows))
    return groups


def cli_reference() -> str:
    """The Markdown of every ``permindex`` subcommand, from the parser."""
    from permindex.cli import build_parser

    parser = build_parser()
    common_epilog = (parser.epilog or "").strip()
    out = [
        "## `permindex`\n",
        _text_block(f"{parser.format_usage()}\n{parser.description or ''}"),
        "### Exit codes\n",
        "Every command exits with one of these codes:\n",
        _text_block(common_epilog),
    ]
    for name, sub in _subcommands(parser).items():
        out.append(f"## `permindex {name}`\n")
        out.append(_text_block(f"{sub.format_usage()}\n{sub.description or ''}"))
        for title, rows in _option_rows(sub):
            out.append(f"**{title.capitalize()}**\n")
            out.append("| option | meaning |\n| --- | --- |")
            out.extend(f"| `{_cell(option)}` | {_cell(text)} |" for option, text in rows)
            out.append("")
        epilog = (sub.epilog or "").strip()
        if epilog.endswith(common_epilog):
            epilog = epilog[: len(epilog) - len(common_epilog)].strip()
        if epilog:
            out.append(_text_block(epilog))
    return "\n".join(out)


# --------------------------------------------------------------------------------------------
# The gRPC API


@dataclass
class Field:
    name: str
    type: str
    number: str
    label: str
    oneof: str
    doc: list[str]


@dataclass
class Block:
    kind: str  # "service", "message", "enum" or "oneof"
    name: str
    doc: list[str]
    items: list[Any] = field(default_factory=list)


@dataclass
class Rpc:
    name: str
    request: str
    response: str
    client_streams: bool
    server_streams: bool
    doc: list[str]


@dataclass
class Proto:
    path: Path
    header: list[str]
    package: str
    blocks: list[Block]


_OPEN = re.compile(r"^(service|message|enum|oneof)\s+(\w+)\s*\{\s*(\})?$")
_RPC = re.compile(
    r"^rpc\s+(\w+)\s*\(\s*(stream\s+)?([\w.]+)\s*\)\s*returns\s*\(\s*(stream\s+)?([\w.]+)\s*\)"
)
_FIELD = re.compile(r"^(?:(optional|repeated)\s+)?([\w.]+)\s+(\w+)\s*=\s*(\d+)\s*(?:\[.*\])?;")
_VALUE = re.compile(r"^(\w+)\s*=\s*(-?\d+)\s*;")


def parse_proto(path: Path) -> Proto:
    """The services, messages and enums of one .proto file, each with its leading comment (the
    ``//`` lines right above it). Covers the proto3 the project writes: no nested messages."""
    header: list[str] = []
    package = ""
    blocks: list[Block] = []
    stack: list[Block] = []
    comment: list[str] = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line.startswith("//"):
            comment.append(line[2:].removeprefix(" "))
            continue
        if not line:
            comment = [] if blocks or stack else comment
            continue
        doc, comment = comment, []
        if line.startswith("syntax"):
            header = doc
        elif line.startswith("package"):
            package = line.removeprefix("package").strip(" ;")
        elif line.startswith("option") and not stack:
            pass
        elif opened := _OPEN.match(line):
            block = Block(opened.group(1), opened.group(2), doc)
            if stack and block.kind == "oneof":
                stack[-1].items.append(block)
            elif not stack:
                blocks.append(block)
            else:
                raise ValueError(f"{path}: nested {block.kind} {block.name} is not supported")
            if not opened.group(3):
                stack.append(block)
        elif line == "}":
            stack.pop()
        elif stack and (rpc := _RPC.match(line)):
            stack[-1].items.append(Rpc(rpc[1], rpc[3], rpc[5], bool(rpc[2]), bool(rpc[4]), doc))
        elif stack and stack[-1].kind == "enum" and (value := _VALUE.match(line)):
            stack[-1].items.append(Field(value[1], "", value[2], "", "", doc))
        elif stack and (found := _FIELD.match(line)):
            label, type_, name, number = found.groups()
            oneof = stack[-1].name if stack[-1].kind == "oneof" else ""
            stack[-1].items.append(Field(name, type_, number, label or "", oneof, doc))
        else:
            raise ValueError(f"{path}: cannot read this line: {raw!r}")
    if stack:
        raise ValueError(f"{path}: {stack[-1].kind} {stack[-1].name} is not closed")
    return Proto(path, header, package, blocks)


def _prose(lines: list[str]) -> str:
    """Comment lines as Markdown: paragraphs and ``- `` lists kept, wrapped lines joined."""
    out: list[str] = []
    for line in lines:
        if not line.strip():
            out.append("")
        elif line.startswith("- "):
            if out and out[-1] and not out[-1].startswith("- "):
                out.append("")  # Markdown needs a blank line before a list
            out.append(line)
        elif out and out[-1]:
            out[-1] += " " + line.strip()
        else:
            out.append(line.strip())
    return "\n".join(out).strip() + "\n"


def _anchor(kind: str, name: str) -> str:
    return f"{kind}-{name.lower()}"


def _type_link(type_: str, known: dict[str, str]) -> str:
    return f"[`{type_}`](#{known[type_]})" if type_ in known else f"`{type_}`"


def _fields_table(block: Block, known: dict[str, str]) -> list[str]:
    members: list[Field] = []
    for item in block.items:
        if isinstance(item, Block):  # a oneof: its fields, with its comment on the first
            for number, member in enumerate(item.items):
                prefix = f"One of `{item.name}`" + (": " + " ".join(item.doc) if not number else "")
                members.append(
                    Field(member.name, member.type, member.number, member.label, item.name,
                          [prefix + ".", *member.doc])
                )  # fmt: skip
        else:
            members.append(item)
    if not members:
        return ["No fields.\n"]
    rows = ["| field | type | number | meaning |", "| --- | --- | ---: | --- |"]
    for member in members:
        type_ = _type_link(member.type, known)
        if member.label:
            type_ = f"{member.label} {type_}"
        rows.append(
            f"| `{member.name}` | {type_} | {member.number} | {_cell(' '.join(member.doc))} |"
        )
    return [*rows, ""]


def grpc_reference() -> str:
    """The Markdown of every .proto file of ``protos/permindex/v1``."""
    out: list[str] = []
    for path in sorted(PROTOS.glob("*.proto")):
        proto = parse_proto(path)
        known = {
            block.name: _anchor(block.kind, block.name)
            for block in proto.blocks
            if block.kind in {"message", "enum"}
        }
        out.append(f"## `{path.relative_to(REPO)}` (package `{proto.package}`)\n")
        out.append(_prose(proto.header))
        for block in (b for b in proto.blocks if b.kind == "service"):
            out.append(f"## Service `{block.name}` {{ #{_anchor('service', block.name)} }}\n")
            out.append(_prose(block.doc))
            for rpc in block.items:
                request = ("stream " if rpc.client_streams else "") + _type_link(rpc.request, known)
                response = ("stream " if rpc.server_streams else "") + _type_link(
                    rpc.response, known
                )
                out.append(f"### `{rpc.name}` {{ #{_anchor('rpc', rpc.name)} }}\n")
                out.append(f"{request} → {response}\n")
                out.append(_prose(rpc.doc))
        out.append("## Messages\n")
        for block in (b for b in proto.blocks if b.kind == "message"):
            out.append(f"### `{block.name}` {{ #{_anchor('message', block.name)} }}\n")
            if block.doc:
                out.append(_prose(block.doc))
            out.extend(_fields_table(block, known))
        out.append("## Enums\n")
        for block in (b for b in proto.blocks if b.kind == "enum"):
            out.append(f"### `{block.name}` {{ #{_anchor('enum', block.name)} }}\n")
            if block.doc:
                out.append(_prose(block.doc))
            out.append("| value | number | meaning |\n| --- | ---: | --- |")
            out.extend(
                f"| `{value.name}` | {value.number} | {_cell(' '.join(value.doc))} |"
                for value in block.items
            )
            out.append("")
    return "\n".join(out)
