"""Prompt formats: how a deployment turns private records and a query into one prompt.

A format is the user's data, not ctxlite's code. It names the record fields and lays them out::

    task = "classify"                          # or "generate"
    instruction = "Decide whether each transaction is fraud or legitimate.\\n"
    record = "Transaction: {transaction}\\nVerdict: {verdict}\\n"
    input = "transaction"                      # what a canary replaces and a query asks about
    output = "verdict"                         # the label (classify) or the target text (generate)
    labels = ["fraud", "legitimate"]           # classify, optional: default = the data's, in order
    chat = false                               # true: the model's own chat template
    chat_examples = "system"                   # or "turns": one user/assistant pair per record

The **query record** is ``record`` cut just before ``{output}`` (trailing spaces dropped): a
record that asks for its output. Plain prompts are ``instruction + records + defence + query``
(ContextLeak's layout, Choi et al. 2025 §3); chat prompts put the instruction and the records in
the system message (or the records as earlier user/assistant turns) and the query in the user
turn, and the answer is read from the assistant turn, as the paper audits chat models.

The two bundled tasks are the built-in formats ``classify`` (subjectivity) and ``generate``
(dialogue summaries). Audit query candidates are filled into the format's query record, so they
fit any format; a format may bring its own (``[queries]``, ``injection``).
"""

from __future__ import annotations

import json
import os
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ctxlite.choices import Choice
from ctxlite.errors import DataError, InvalidParameter
from ctxlite.identity import content_hash
from ctxlite.records import read_table
from ctxlite.runtime.templates import audit_templates

OUTPUT_SLOT_STRIP = " \t"
"""Trailing characters cut off the query record (the answer's own separator, e.g. ``"Label: "``)."""


class Task(Choice):
    """What the audited prompt asks for (``--task``): a label (``classify``) or a text (``generate``)."""

    CLASSIFY = "classify"
    GENERATE = "generate"


class ChatExamples(Choice):
    """Where a chat prompt puts the private records."""

    SYSTEM = "system"  # in the system message, laid out by ``record``
    TURNS = "turns"  # one user (query record) / assistant (output) pair each


KEYS = ("task", "instruction", "record", "input", "output", "labels", "chat", "chat_examples", "queries", "injection")


def _record_fields(record: str, where: str) -> list[str]:
    try:
        parsed = list(string.Formatter().parse(record))
    except ValueError as exc:
        raise InvalidParameter(f"{where}: record is not a valid format string ({exc}); write braces as {{{{ }}}}")
    names = []
    for _, name, spec, conv in parsed:
        if name is None:
            continue
        if not name.isidentifier() or spec or conv:
            raise InvalidParameter(f"{where}: record slot {{{name}}} must be a plain field name")
        names.append(name)
    return names


@dataclass(frozen=True)
class AuditFormat:
    """A deployment's prompt format (validated on construction; see the module docstring)."""

    task: Task
    instruction: str
    record: str
    input: str
    output: str
    labels: tuple[str, ...] = ()
    chat: bool = False
    chat_examples: ChatExamples = ChatExamples.SYSTEM
    queries: Mapping[str, tuple] | None = None
    injection: str | None = None
    name: str = "custom"
    source: str = ""  # the text the format was read from (the run record keeps it)
    render_chat: Callable[[list[dict]], str] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        s = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731
        where = f"format {self.name}"
        s("task", Task.parse(self.task))
        s("chat_examples", ChatExamples.parse(self.chat_examples))
        for key in ("instruction", "record", "input", "output"):
            if not isinstance(getattr(self, key), str):
                raise InvalidParameter(f"{where}: {key} must be a string")
        if not isinstance(self.chat, bool):
            raise InvalidParameter(f"{where}: chat must be true or false")
        names = _record_fields(self.record, where)
        if self.output not in names:
            raise InvalidParameter(f"{where}: the output field {{{self.output}}} is missing from record")
        if names.count(self.output) > 1:
            raise InvalidParameter(f"{where}: the output field {{{self.output}}} appears twice in record")
        if self.input == self.output:
            raise InvalidParameter(f"{where}: input and output must be different fields")
        if self.input not in names[: names.index(self.output)]:
            raise InvalidParameter(
                f"{where}: the input field {{{self.input}}} must appear in record before {{{self.output}}}"
            )
        labels = self.labels
        if isinstance(labels, str) or not all(isinstance(l, str) and l.strip() for l in labels):
            raise InvalidParameter(f"{where}: labels must be a list of non-empty strings")
        s("labels", tuple(labels))
        if self.task is Task.GENERATE and self.labels:
            raise InvalidParameter(f"{where}: a generate format has no labels")
        if self.labels and len(set(self.labels)) < 2:
            raise InvalidParameter(f"{where}: a classify format needs at least two distinct labels")
        if self.labels and len(set(self.labels)) != len(self.labels):
            raise InvalidParameter(f"{where}: labels repeat: {list(self.labels)}")
        s("queries", _query_table(self.queries, where))
        if self.injection is not None and not isinstance(self.injection, str):
            raise InvalidParameter(f"{where}: injection must be a string (the input of the injection query)")

    # ----- reading -------------------------------------------------------
    @classmethod
    def builtin(cls, name: str) -> AuditFormat:
        """A bundled format: ``classify`` (subjectivity labels) or ``generate`` (dialogue summaries)."""
        table = audit_templates()["formats"]
        if name not in table:
            raise InvalidParameter(f"unknown format {name!r}: use one of {', '.join(table)} or a .toml/.json file")
        return cls.from_mapping(table[name], name=name, source=json.dumps(table[name], sort_keys=True))

    @classmethod
    def from_mapping(cls, data: Mapping, name: str = "custom", source: str = "") -> AuditFormat:
        where = f"format {name}"
        if not isinstance(data, Mapping):
            raise InvalidParameter(f"{where}: expected a table of keys, got {type(data).__name__}")
        unknown = sorted(set(data) - set(KEYS))
        if unknown:
            raise InvalidParameter(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(KEYS)})")
        missing = [k for k in ("task", "instruction", "record", "input", "output") if k not in data]
        if missing:
            raise InvalidParameter(f"{where}: missing key {missing[0]!r}")
        if "labels" in data and isinstance(data["labels"], (list, tuple)) and not data["labels"]:
            raise InvalidParameter(
                f"{where}: labels = [] lists no labels: give at least two, or leave labels out to take the "
                "data's own labels"
            )
        return cls(**dict(data), name=name, source=source or json.dumps(dict(data), sort_keys=True))

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> AuditFormat:
        """A format from a ``.toml`` or ``.json`` file (errors name the file)."""
        data, text = read_table(path, "format")
        return cls.from_mapping(data, name=str(path), source=text)

    def identity(self) -> dict:
        """What a run record keeps: the format's name, text and hash (labels as resolved)."""
        return {
            "name": self.name,
            "text": self.source,
            "hash": content_hash(self.source),
            "labels": list(self.labels),
            "chat": self.chat,
        }

    # ----- records -------------------------------------------------------
    @property
    def fields(self) -> list[str]:
        """The record fields ``record`` uses (input and output among them)."""
        return list(dict.fromkeys(_record_fields(self.record, self.name)))

    def with_labels(self, records: Sequence[dict]) -> AuditFormat:
        """Classify: the labels resolved against the data (default: its distinct outputs in order of first
        appearance); a label that never occurs, an output that is no label, or fewer than two classes is refused."""
        if self.task is not Task.CLASSIFY:
            return self
        seen = list(dict.fromkeys(r[self.output] for r in records))
        if not self.labels:
            if len(seen) < 2:
                raise DataError(f"format {self.name}: the data has {len(seen)} distinct {self.output!r}; need two")
            return replace(self, labels=tuple(seen))
        never = [l for l in self.labels if l not in seen]
        if never:
            raise DataError(f"format {self.name}: label {never[0]!r} never occurs in the data's {self.output!r}")
        return self

    def with_chat(self, chat: bool, render: Callable[[list[dict]], str] | None = None) -> AuditFormat:
        """This format with chat switched on or off and the model's chat renderer bound."""
        return replace(self, chat=bool(chat), render_chat=render)

    # ----- prompts -------------------------------------------------------
    @property
    def query_record(self) -> str:
        """``record`` cut before ``{output}``, its trailing spaces dropped."""
        cut = self.record.index("{" + self.output + "}")
        return self.record[:cut].rstrip(OUTPUT_SLOT_STRIP)

    @property
    def answer_prefix(self) -> str:
        """What the model writes before the output: the spaces dropped from the query record (none in chat)."""
        if self.chat:
            return ""
        cut = self.record.index("{" + self.output + "}")
        return self.record[len(self.query_record) : cut]

    def examples(self, records: Sequence[dict]) -> str:
        return "".join(self.record.format(**r) for r in records)

    def query_for(self, record: Mapping) -> str:
        """The query record filled from ``record`` (its output unused)."""
        return self.query_record.format(**record)

    def prompt(self, records: Sequence[dict], query: str, defense: str = "") -> str:
        """The prompt asking ``query`` with ``records`` private (plain, or through the chat template)."""
        if not self.chat:
            return self.instruction + self.examples(records) + defense + query
        if self.render_chat is None:
            raise InvalidParameter(f"format {self.name}: a chat prompt needs the model's chat template (with_chat)")
        if self.chat_examples is ChatExamples.SYSTEM:
            system = (self.instruction + self.examples(records) + defense).strip()
            messages = [{"role": "system", "content": system}, {"role": "user", "content": query}]
        else:
            messages = [{"role": "system", "content": self.instruction.strip()}]
            for r in records:
                messages += [
                    {"role": "user", "content": self.query_for(r)},
                    {"role": "assistant", "content": str(r[self.output])},
                ]
            messages.append({"role": "user", "content": defense + query})
        return self.render_chat(messages)

    def gist(self, records: Sequence[dict]) -> str:
        """The private examples on one line, for the judge prompt."""
        return " ".join(self.examples(records).split())

    def query_candidates(self, kind: str) -> list[dict]:
        """The audit query candidates of ``kind`` (``{"input": ..., "lead": ...}``): the format's own, else
        the bundled ones for its task."""
        table = self.queries or _query_table(audit_templates()["queries"][self.task.value], "bundled queries")
        return list(table.get(kind, ()))

    def injection_input(self) -> str:
        return self.injection if self.injection is not None else audit_templates()["injection"][self.task.value]


def _query_table(table, where: str) -> dict[str, tuple] | None:
    """Query candidates as ``{kind: ({"input": str, "lead": str}, ...)}``; a bare string is an input."""
    if table is None:
        return None
    if not isinstance(table, Mapping):
        raise InvalidParameter(f"{where}: queries must be a table of kind = [candidates]")
    out = {}
    for kind, cands in table.items():
        if kind not in ("input-output", "if-then", "if-then-blind"):
            raise InvalidParameter(f"{where}: unknown query kind {kind!r}")
        if isinstance(cands, (str, Mapping)) or not cands:
            raise InvalidParameter(f"{where}: queries.{kind} must be a non-empty list")
        items = []
        for c in cands:
            c = {"input": c} if isinstance(c, str) else dict(c)
            if not isinstance(c.get("input"), str) or set(c) - {"input", "lead"}:
                raise InvalidParameter(f"{where}: a query candidate is a string or a table with input (and lead)")
            items.append({"input": c["input"], "lead": str(c.get("lead", ""))})
        out[kind] = tuple(items)
    return out


def load_format(spec) -> AuditFormat:
    """A format from a built-in name, a ``.toml``/``.json`` path, a :class:`Task` or an ``AuditFormat``."""
    if isinstance(spec, AuditFormat):
        return spec
    if isinstance(spec, Task):
        return AuditFormat.builtin(spec.value)
    spec = str(spec)
    if Path(spec).suffix.lower() not in (".toml", ".json"):
        return AuditFormat.builtin(spec)  # refuses an unknown name, listing the built-ins
    if not Path(spec).is_file():
        raise InvalidParameter(f"format file {spec} does not exist")
    return AuditFormat.from_file(spec)
