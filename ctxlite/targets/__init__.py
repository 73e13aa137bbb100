"""The systems an audit can query as a black box (issue 47): a chat API, the user's own HTTP
application, a pair of commands, or any Python object with ``load`` and ``ask``.

Every target is a :class:`Target`: ``load(records)`` puts a record set into the system (its
store, its prompt), ``ask(query, seed)`` asks it one question and returns the text it answers,
and ``identity()`` names the system audited (kind, URL or command, the target file's hash) for
the audit log's header. The audit game itself is :mod:`ctxlite.audit.target_game`; these modules
only talk to the system.
"""

from __future__ import annotations

from ctxlite.targets.base import Target, check_target
from ctxlite.targets.chat import ChatTarget
from ctxlite.targets.command import CommandTarget
from ctxlite.targets.http import HttpTarget
from ctxlite.targets.spec import TargetKind, TargetSpec, load_target_file, open_target

__all__ = [
    "ChatTarget",
    "CommandTarget",
    "HttpTarget",
    "Target",
    "TargetKind",
    "TargetSpec",
    "check_target",
    "load_target_file",
    "open_target",
]
