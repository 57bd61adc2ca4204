"""A real SMTP server on localhost (aiosmtpd) whose inbox a test reads."""

from __future__ import annotations

import email
import email.policy


class Inbox:
    """An aiosmtpd handler keeping every message it receives, parsed, in ``messages``."""

    def __init__(self):
        self.messages: list[email.message.EmailMessage] = []

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's name)
        self.messages.append(email.message_from_bytes(envelope.content,
                                                      policy=email.policy.default))
        return "250 OK"
