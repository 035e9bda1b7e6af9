"""Journal session ids and owners for conversations."""

from __future__ import annotations

from pydantic_ai.exceptions import UserError

from journal import InvalidInputError, validate_session_id


class Naming:
    """A conversation's session id is `prefix + conversation_id`; its owner is its scope.

    The owner (`session_context.owner_id`, what `journal ls --owner` filters by) is
    the conversation's scope when the scope can be one (a non-blank string of at
    most 4 KiB), else `default_owner`.
    """

    def __init__(self, prefix: str, default_owner: str):
        self.prefix = prefix
        self.default_owner = default_owner

    def session_id(self, conversation_id: str) -> str:
        sid = self.prefix + conversation_id
        try:
            validate_session_id(sid)
        except InvalidInputError as exc:
            raise UserError(
                f"conversation id {conversation_id!r} cannot name a journal session: {exc}"
            ) from None
        return sid

    def owner(self, scope: str | None) -> str:
        if isinstance(scope, str) and scope.strip() and len(scope.encode()) <= 4096:
            return scope
        return self.default_owner
