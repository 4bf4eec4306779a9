"""A strict subset of Go's text/template syntax, parsed into a small tree.

gitops-reverser's commit messages are Go templates. No maintained Python library implements Go's
template language (the Jinja-likes differ in exactly the details a byte-identical message needs:
whitespace trimming, truth, how values print), so this parses the part of it commit templates use:
text, `{{- -}}` trimming, comments, fields and field chains, `$` and declared variables,
parenthesised pipelines, `|` pipelines, string/raw-string/integer/boolean literals,
`if`/`else if`/`else with`/`else`, `range` (with `$i, $v :=` and `else`) and `with`, and the
functions `and or not len index print printf println eq ne lt le gt ge`. Everything else Go has
(`define`, `template`, `block`, `break`, `continue`, `nil`, other functions, float, hex or
character literals, assignment with `=`) is refused here by name, at configuration time, so a
template is never half-understood at commit time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "FUNCTIONS",
    "Action",
    "Command",
    "Field",
    "If",
    "Literal",
    "Node",
    "Operand",
    "Pipeline",
    "Range",
    "TemplateSyntaxError",
    "Text",
    "Variable",
    "With",
    "parse",
]

FUNCTIONS = frozenset(
    {"and", "or", "not", "len", "index", "print", "printf", "println", "eq", "ne", "lt", "le", "gt", "ge"}
)
_GO_FUNCTIONS = frozenset({"html", "js", "urlquery", "slice", "call"})
_REFUSED_KEYWORDS = frozenset({"define", "template", "block", "break", "continue"})
_SPACE = " \t\r\n"


class TemplateSyntaxError(ValueError):
    """A template that does not parse, or uses a construct outside the supported subset."""


@dataclass(frozen=True, slots=True)
class Field:
    """`.A.B` on dot (`base` None), on a variable, or on a parenthesised pipeline."""

    names: tuple[str, ...]
    base: Variable | Pipeline | None = None


@dataclass(frozen=True, slots=True)
class Variable:
    """`$` or `$name`."""

    name: str


@dataclass(frozen=True, slots=True)
class Literal:
    value: str | int | bool


@dataclass(frozen=True, slots=True)
class Dot:
    pass


@dataclass(frozen=True, slots=True)
class Function:
    name: str


Operand = Field | Variable | Literal | Dot | Function


@dataclass(frozen=True, slots=True)
class Command:
    args: tuple[Operand | Pipeline, ...]


@dataclass(frozen=True, slots=True)
class Pipeline:
    declare: tuple[str, ...]
    commands: tuple[Command, ...]


@dataclass(frozen=True, slots=True)
class Text:
    text: str


@dataclass(frozen=True, slots=True)
class Action:
    pipeline: Pipeline


@dataclass(frozen=True, slots=True)
class If:
    pipeline: Pipeline
    body: tuple[Node, ...]
    orelse: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class With:
    pipeline: Pipeline
    body: tuple[Node, ...]
    orelse: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Range:
    pipeline: Pipeline
    body: tuple[Node, ...]
    orelse: tuple[Node, ...]


Node = Text | Action | If | With | Range

# --- lexing: the template as text pieces and action token lists ------------------------------

_TOKEN = re.compile(
    r"""(?P<space>[ \t\r\n]+)
    |(?P<raw>`[^`]*`)
    |(?P<string>"(?:[^"\\\n]|\\.)*")
    |(?P<char>'(?:[^'\\\n]|\\.)*')
    |(?P<declare>:=)
    |(?P<assign>=)
    |(?P<number>[+-]?[0-9][0-9a-zA-Z_.]*|[+-]?\.[0-9][0-9a-zA-Z_.]*)
    |(?P<field>(?:\.[A-Za-z_][A-Za-z0-9_]*)+)
    |(?P<dot>\.)
    |(?P<variable>\$[A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
    |(?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    |(?P<punct>[|(),])
    """,
    re.VERBOSE,
)
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\", '"': '"'}


@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str
    text: str
    start: int
    end: int


def _unquote(body: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in _ESCAPES:
            out.append(_ESCAPES[nxt])
            i += 2
        elif nxt in "xuU":
            size = {"x": 2, "u": 4, "U": 8}[nxt]
            digits = body[i + 2 : i + 2 + size]
            if len(digits) != size or not re.fullmatch(r"[0-9a-fA-F]+", digits):
                raise TemplateSyntaxError(f"invalid escape \\{nxt}{digits} in a string")
            if nxt == "x":
                raise TemplateSyntaxError("\\x byte escapes in strings are not supported")
            out.append(chr(int(digits, 16)))
            i += 2 + size
        else:
            raise TemplateSyntaxError(f"escape \\{nxt} in a string is not supported")
    return "".join(out)


def _tokens(action: str) -> list[_Tok]:
    tokens: list[_Tok] = []
    pos = 0
    while pos < len(action):
        match = _TOKEN.match(action, pos)
        if match is None:
            raise TemplateSyntaxError(f"unexpected {action[pos]!r} in action {{{{{action.strip()}}}}}")
        kind = match.lastgroup or ""
        text = match.group()
        pos = match.end()
        if kind == "space":
            continue
        tokens.append(_Tok(kind, text, match.start(), pos))
    return tokens


def _split(source: str) -> list[str | list[_Tok]]:
    """Text and action token lists in order, with `{{-`/`-}}` trimming applied."""
    pieces: list[str | list[_Tok]] = []
    pos = 0
    trim_next = False
    while True:
        start = source.find("{{", pos)
        text = source[pos:] if start < 0 else source[pos:start]
        if trim_next:
            text = text.lstrip(_SPACE)
        if start < 0:
            if text:
                pieces.append(text)
            return pieces
        inner_start = start + 2
        if source.startswith("- ", inner_start) or (
            source.startswith("-", inner_start)
            and source[inner_start + 1 : inner_start + 2] in ("\t", "\r", "\n")
        ):
            text = text.rstrip(_SPACE)
            inner_start += 2
        if text:
            pieces.append(text)
        if source.startswith("/*", inner_start):
            comment_end = source.find("*/", inner_start + 2)
            if comment_end < 0:
                raise TemplateSyntaxError("unclosed comment")
            after = source[comment_end + 2 :]
            if after[:1] in tuple(_SPACE) and after[1:4] == "-}}":
                trim_next, pos = True, comment_end + 6
            elif after.startswith("}}"):
                trim_next, pos = False, comment_end + 4
            else:
                raise TemplateSyntaxError("comment ends before closing delimiter")
            continue
        end, trim_next = _action_end(source, inner_start)
        pieces.append(_tokens(source[inner_start:end]))
        pos = end + (4 if trim_next else 2)


def _action_end(source: str, pos: int) -> tuple[int, bool]:
    """Where the action starting at `pos` closes (skipping quoted text), and whether it trims."""
    i = pos
    while i < len(source):
        ch = source[i]
        if ch in "\"'`":
            close = i + 1
            while close < len(source) and source[close] != ch:
                if source[close] == "\n" and ch != "`":
                    raise TemplateSyntaxError("unterminated quoted string")
                close += 2 if source[close] == "\\" and ch != "`" else 1
            if close >= len(source):
                raise TemplateSyntaxError("unterminated quoted string")
            i = close + 1
            continue
        if source[i] in _SPACE and source.startswith("-}}", i + 1):
            return i, True
        if source.startswith("}}", i):
            return i, False
        i += 1
    raise TemplateSyntaxError("unclosed action")


# --- parsing ---------------------------------------------------------------------------------


class _Parser:
    def __init__(self, pieces: list[str | list[_Tok]]) -> None:
        self.pieces = pieces
        self.index = 0
        self.scopes: list[set[str]] = [{"$"}]

    def declare(self, names: tuple[str, ...]) -> None:
        self.scopes[-1].update(names)

    def known(self, name: str) -> bool:
        return any(name in scope for scope in self.scopes)

    def nodes(self, closers: frozenset[str]) -> tuple[tuple[Node, ...], list[_Tok] | None]:
        """Nodes up to an action whose first word is in `closers` (returned), or the end."""
        out: list[Node] = []
        while self.index < len(self.pieces):
            piece = self.pieces[self.index]
            self.index += 1
            if isinstance(piece, str):
                out.append(Text(piece))
                continue
            if not piece:
                raise TemplateSyntaxError("missing value for command")
            head = piece[0]
            word = head.text if head.kind == "ident" else ""
            if word in closers:
                return tuple(out), piece
            if word in ("end", "else"):
                raise TemplateSyntaxError(f"unexpected {{{{{word}}}}}")
            if word in _REFUSED_KEYWORDS:
                raise TemplateSyntaxError(f"{{{{{word}}}}} is not supported in commit message templates")
            if word in ("if", "with", "range"):
                out.append(self.control(word, piece[1:]))
                continue
            pipeline = self.pipeline(piece, declare_ok=True)
            self.declare(pipeline.declare)
            out.append(Action(pipeline))
        if closers:
            raise TemplateSyntaxError("unexpected end of template: missing {{end}}")
        return tuple(out), None

    def control(self, word: str, tokens: list[_Tok]) -> Node:
        self.scopes.append(set())
        try:
            pipeline = self.pipeline(tokens, declare_ok=True, ranging=word == "range")
            if not pipeline.commands:
                raise TemplateSyntaxError(f"missing value for {word}")
            self.declare(pipeline.declare)
            body, closer = self.nodes(frozenset({"end", "else"}))
            orelse: tuple[Node, ...] = ()
            if closer is not None and closer[0].text == "else":
                if len(closer) > 1:
                    # `{{else if b}}` is `{{else}}{{if b}}...{{end}}{{end}}` sharing one {{end}}
                    # (`else with` likewise, in a `with`), as in Go.
                    chained = closer[1].text if closer[1].kind == "ident" else ""
                    if chained != word or word == "range":
                        raise TemplateSyntaxError(f"unexpected tokens after {{{{else}}}} in {word}")
                    orelse = (self.control(chained, closer[2:]),)
                    return self.make(word, pipeline, body, orelse)
                orelse, closer = self.nodes(frozenset({"end"}))
            if closer is None or closer[0].text != "end":
                raise TemplateSyntaxError(f"missing {{{{end}}}} for {word}")
            if len(closer) > 1:
                raise TemplateSyntaxError("unexpected tokens after {{end}}")
            return self.make(word, pipeline, body, orelse)
        finally:
            self.scopes.pop()

    @staticmethod
    def make(word: str, pipeline: Pipeline, body: tuple[Node, ...], orelse: tuple[Node, ...]) -> Node:
        if word == "if":
            return If(pipeline, body, orelse)
        if word == "with":
            return With(pipeline, body, orelse)
        return Range(pipeline, body, orelse)

    def pipeline(self, tokens: list[_Tok], declare_ok: bool, ranging: bool = False) -> Pipeline:
        declare: tuple[str, ...] = ()
        decl_end = next((i for i, t in enumerate(tokens) if t.kind in ("declare", "assign")), -1)
        if decl_end >= 0:
            if tokens[decl_end].kind == "assign":
                raise TemplateSyntaxError("assigning to a variable with = is not supported")
            names = [t for t in tokens[:decl_end] if t.text != ","]
            commas = [t for t in tokens[:decl_end] if t.text == ","]
            if not declare_ok or not names or any(t.kind != "variable" or "." in t.text for t in names):
                raise TemplateSyntaxError("unexpected := (declare variables as $name := ...)")
            if len(names) > (2 if ranging else 1) or len(commas) != len(names) - 1:
                raise TemplateSyntaxError("too many declarations")
            declare = tuple(t.text for t in names)
            tokens = tokens[decl_end + 1 :]
        commands: list[Command] = []
        position = 0
        while position <= len(tokens):
            end = position
            depth = 0
            while end < len(tokens) and not (tokens[end].text == "|" and depth == 0):
                depth += {"(": 1, ")": -1}.get(tokens[end].text, 0) if tokens[end].kind == "punct" else 0
                end += 1
            segment = tokens[position:end]
            if not segment:
                if tokens or declare:
                    raise TemplateSyntaxError("missing command in pipeline")
                break
            commands.append(self.command(segment))
            position = end + 1
        for later in commands[1:]:
            if not isinstance(later.args[0], Function):
                raise TemplateSyntaxError("a value after | must be a function")
        return Pipeline(declare, tuple(commands))

    def command(self, tokens: list[_Tok]) -> Command:
        args: list[Operand | Pipeline] = []
        i = 0
        while i < len(tokens):
            tok = tokens[i]
            if tok.text == "(" and tok.kind == "punct":
                depth, end = 1, i + 1
                while end < len(tokens) and depth:
                    if tokens[end].kind == "punct":
                        depth += {"(": 1, ")": -1}.get(tokens[end].text, 0)
                    end += 1
                if depth:
                    raise TemplateSyntaxError("unclosed left paren")
                inner = self.pipeline(tokens[i + 1 : end - 1], declare_ok=False)
                if not inner.commands:
                    raise TemplateSyntaxError("missing value in parentheses")
                i = end
                if i < len(tokens) and tokens[i].kind == "field" and tokens[i].start == tokens[i - 1].end:
                    args.append(Field(tuple(tokens[i].text[1:].split(".")), inner))
                    i += 1
                else:
                    args.append(inner)
                continue
            if tok.kind == "punct":
                raise TemplateSyntaxError(f"unexpected {tok.text!r} in command")
            args.append(self.operand(tok))
            i += 1
        if len(args) > 1 and not isinstance(args[0], Function):
            raise TemplateSyntaxError(
                "arguments can be given to functions only (methods with arguments are not supported)"
            )
        for arg in args[1:]:
            if isinstance(arg, Function):
                raise TemplateSyntaxError(f"function {arg.name!r} used as a value")
        return Command(tuple(args))

    def operand(self, tok: _Tok) -> Operand:
        kind, text = tok.kind, tok.text
        if kind == "field":
            return Field(tuple(text[1:].split(".")))
        if kind == "dot":
            return Dot()
        if kind == "variable":
            name, _, chain = text.partition(".")
            if not self.known(name):
                raise TemplateSyntaxError(f"undefined variable {name!r}")
            return Field(tuple(chain.split(".")), Variable(name)) if chain else Variable(name)
        if kind == "string":
            return Literal(_unquote(text[1:-1]))
        if kind == "raw":
            return Literal(text[1:-1].replace("\r", ""))
        if kind == "number":
            if not re.fullmatch(r"[+-]?[0-9]+", text) or (
                len(text.lstrip("+-")) > 1 and text.lstrip("+-").startswith("0")
            ):
                raise TemplateSyntaxError(f"number literal {text} is not supported (decimal integers only)")
            return Literal(int(text))
        if kind == "char":
            raise TemplateSyntaxError(f"character literal {text} is not supported")
        if kind == "ident":
            if text in ("true", "false"):
                return Literal(text == "true")
            if text == "nil":
                raise TemplateSyntaxError("nil is not supported")
            if text in FUNCTIONS:
                return Function(text)
            if text in _GO_FUNCTIONS:
                raise TemplateSyntaxError(f"function {text!r} is not supported in commit message templates")
            if text in _REFUSED_KEYWORDS or text in ("if", "else", "end", "range", "with"):
                raise TemplateSyntaxError(f"unexpected {text!r} in command")
            raise TemplateSyntaxError(f'function "{text}" not defined')
        raise TemplateSyntaxError(f"unexpected {text!r}")


def parse(source: str) -> tuple[Node, ...]:
    """The template's tree, or TemplateSyntaxError naming what is wrong or unsupported."""
    parser = _Parser(_split(source))
    nodes, _ = parser.nodes(frozenset())
    return nodes
