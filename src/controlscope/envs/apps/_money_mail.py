"""The mail app (messages with attachments) and the payments app (balances, transfers,
requests)."""

from __future__ import annotations

from typing import Any

from controlscope.envs.apps._api import AppError, Param, Session, api, app, paging
from controlscope.envs.apps._people import register_login
from controlscope.envs.apps._stores import put_file

__all__: list[str] = []

# --- mail -----------------------------------------------------------------------------------

app("mail", "Email: your inbox and sent messages, attachments, and sending new messages.")
register_login("mail")

_SUMMARY = (
    "m.message_id, m.sender_email, m.recipient_email, m.subject, m.sent_at, m.read, "
    "(SELECT count(*) FROM mail_attachments a WHERE a.message_id = m.message_id) AS attachments"
)


def _listing(s: Session, box: str, query: str, unread_only: bool, index: int, limit: int) -> Any:
    size, offset = paging(index, limit)
    mine = "m.recipient_email" if box == "inbox" else "m.sender_email"
    like = query.lower()  # a substring, never a pattern
    return s.rows(
        f"SELECT {_SUMMARY} FROM mail_messages m WHERE {mine} = ? AND "
        "(instr(lower(m.subject), ?) OR instr(lower(m.body), ?) OR "
        "instr(lower(m.sender_email), ?) OR instr(lower(m.recipient_email), ?)) AND "
        "(? = 0 OR m.read = 0) "
        "ORDER BY m.sent_at DESC, m.message_id DESC LIMIT ? OFFSET ?",
        (s.user, like, like, like, like, int(unread_only), size, offset),
    )


_QUERY = Param(
    "query", "string", "text to look for in subject, body or address", required=False, default=""
)


@api(
    "mail",
    "show_inbox",
    "List the messages you received, newest first.",
    [
        _QUERY,
        Param("unread_only", "boolean", "only unread messages", required=False, default=False),
    ],
    returns="a list of {message_id, sender_email, recipient_email, subject, sent_at, read, "
    "attachments (their number)}",
    paged=True,
)
def _show_inbox(
    s: Session,
    query: str = "",
    unread_only: bool = False,
    page_index: int = 0,
    page_limit: int = 5,
) -> Any:
    return _listing(s, "inbox", query, unread_only, page_index, page_limit)


@api(
    "mail",
    "show_sent",
    "List the messages you sent, newest first.",
    [_QUERY],
    returns="a list of {message_id, sender_email, recipient_email, subject, sent_at, read, "
    "attachments}",
    paged=True,
)
def _show_sent(s: Session, query: str = "", page_index: int = 0, page_limit: int = 5) -> Any:
    return _listing(s, "sent", query, False, page_index, page_limit)


def _message(s: Session, message_id: int) -> dict[str, Any]:
    return s.row(
        "SELECT * FROM mail_messages WHERE message_id = ? AND (recipient_email = ? OR "
        "sender_email = ?)",
        (message_id, s.user, s.user),
        f"message {message_id}",
    )


@api(
    "mail",
    "show_message",
    "Show one message with its body and its attachments' names (reading it does not mark it read).",
    [Param("message_id", "integer", "the message's id")],
    returns="{message_id, sender_email, recipient_email, subject, body, sent_at, read, "
    "attachments: [{attachment_id, file_name}]}",
)
def _show_message(s: Session, message_id: int) -> dict[str, Any]:
    found = _message(s, message_id)
    found["attachments"] = s.rows(
        "SELECT attachment_id, file_name FROM mail_attachments WHERE message_id = ? "
        "ORDER BY attachment_id",
        (message_id,),
    )
    return found


@api(
    "mail",
    "send_message",
    "Send a message; files from your file store can be attached by path.",
    [
        Param("recipient_email", "string", "the recipient's email address"),
        Param("subject", "string", "the subject"),
        Param("body", "string", "the text"),
        Param(
            "attachment_paths",
            "string_list",
            "paths of files in your file store to attach",
            required=False,
            default=None,
        ),
    ],
    returns="{message_id}",
    writes=True,
)
def _send_message(
    s: Session,
    recipient_email: str,
    subject: str,
    body: str,
    attachment_paths: list[str] | None = None,
) -> dict[str, int]:
    if "@" not in recipient_email:
        raise AppError(422, f"{recipient_email!r} is not an email address")
    files = []
    for path in attachment_paths or []:
        files.append(
            s.row(
                "SELECT path, content FROM files_files WHERE owner_email = ? AND path = ?",
                (s.user, path),
                f"file {path}",
            )
        )
    new = s.write(
        "INSERT INTO mail_messages (sender_email, recipient_email, subject, body, sent_at, read)"
        " VALUES (?, ?, ?, ?, ?, 1)",
        (s.user, recipient_email, subject, body, s.now),
    )
    for f in files:
        s.write(
            "INSERT INTO mail_attachments (message_id, file_name, content) VALUES (?, ?, ?)",
            (new, f["path"].rsplit("/", 1)[-1], f["content"]),
        )
    return {"message_id": new}


@api(
    "mail",
    "mark_read",
    "Mark a received message read or unread.",
    [
        Param("message_id", "integer", "the message's id"),
        Param("read", "boolean", "true: read; false: unread", required=False, default=True),
    ],
    returns="{message}",
    writes=True,
)
def _mark_read(s: Session, message_id: int, read: bool = True) -> dict[str, str]:
    _message(s, message_id)
    s.write("UPDATE mail_messages SET read = ? WHERE message_id = ?", (int(read), message_id))
    return {"message": f"message {message_id} marked {'read' if read else 'unread'}"}


@api(
    "mail",
    "delete_message",
    "Delete a message.",
    [Param("message_id", "integer", "the message's id")],
    returns="{message}",
    writes=True,
)
def _delete_message(s: Session, message_id: int) -> dict[str, str]:
    _message(s, message_id)
    s.write("DELETE FROM mail_attachments WHERE message_id = ?", (message_id,))
    s.write("DELETE FROM mail_messages WHERE message_id = ?", (message_id,))
    return {"message": f"message {message_id} deleted"}


@api(
    "mail",
    "save_attachment",
    "Save an attachment of one of your messages into your file store.",
    [
        Param("attachment_id", "integer", "the attachment's id"),
        Param("path", "string", "where to save it in your file store (absolute, e.g. /docs/a.txt)"),
    ],
    returns="{path}",
    writes=True,
)
def _save_attachment(s: Session, attachment_id: int, path: str) -> dict[str, str]:
    found = s.row(
        "SELECT message_id, content FROM mail_attachments WHERE attachment_id = ?",
        (attachment_id,),
        f"attachment {attachment_id}",
    )
    _message(s, int(found["message_id"]))
    put_file(s, path, str(found["content"]), overwrite=False)
    return {"path": path}


# --- payments -------------------------------------------------------------------------------

app(
    "payments",
    "Money between people: your balance, transfers sent and received, and payment requests.",
)
register_login("payments")


def _amount(amount: float) -> float:
    if not amount > 0:
        raise AppError(422, "the amount must be more than 0")
    if round(amount, 2) != amount:
        raise AppError(422, "the amount has at most two decimals")
    return float(amount)


def _balance(s: Session, email: str) -> float:
    row = s.db.execute("SELECT balance FROM payments_accounts WHERE email = ?", (email,))
    found = row.fetchone()
    if found is None:
        raise AppError(404, f"{email} has no payments account")
    return float(found[0])


def _transfer(s: Session, sender: str, receiver: str, amount: float, description: str) -> int:
    if sender == receiver:
        raise AppError(422, "you cannot send money to yourself")
    have = _balance(s, sender)
    _balance(s, receiver)
    if have < amount:
        raise AppError(409, f"insufficient balance: {have:.2f} is less than {amount:.2f}")
    s.write(
        "UPDATE payments_accounts SET balance = round(balance - ?, 2) WHERE email = ?",
        (amount, sender),
    )
    s.write(
        "UPDATE payments_accounts SET balance = round(balance + ?, 2) WHERE email = ?",
        (amount, receiver),
    )
    return s.write(
        "INSERT INTO payments_transactions (sender_email, receiver_email, amount, description, "
        "created_at) VALUES (?, ?, ?, ?, ?)",
        (sender, receiver, amount, description, s.now),
    )


@api("payments", "show_balance", "Show your balance.", returns="{balance}")
def _show_balance(s: Session) -> dict[str, float]:
    return {"balance": _balance(s, s.user)}


_DIRECTION = Param(
    "direction",
    "string",
    "sent: only what you sent; received: only what you received",
    required=False,
    choices=("sent", "received"),
)


@api(
    "payments",
    "show_transactions",
    "List your transactions, newest first.",
    [
        Param("user_email", "string", "only transactions with this person", required=False),
        _DIRECTION,
    ],
    returns="a list of {transaction_id, sender_email, receiver_email, amount, description, "
    "created_at}",
    paged=True,
)
def _show_transactions(
    s: Session,
    user_email: str | None = None,
    direction: str | None = None,
    page_index: int = 0,
    page_limit: int = 5,
) -> Any:
    size, offset = paging(page_index, page_limit)
    sent = direction in (None, "sent")
    received = direction in (None, "received")
    return s.rows(
        "SELECT * FROM payments_transactions WHERE ((? AND sender_email = ? AND "
        "(? IS NULL OR receiver_email = ?)) OR (? AND receiver_email = ? AND "
        "(? IS NULL OR sender_email = ?))) ORDER BY created_at DESC, transaction_id DESC "
        "LIMIT ? OFFSET ?",
        (
            sent,
            s.user,
            user_email,
            user_email,
            received,
            s.user,
            user_email,
            user_email,
            size,
            offset,
        ),
    )


@api(
    "payments",
    "send_money",
    "Send money to someone's payments account.",
    [
        Param("receiver_email", "string", "who gets the money"),
        Param("amount", "number", "how much (more than 0, two decimals at most)"),
        Param("description", "string", "what it is for", required=False, default=""),
    ],
    returns="{transaction_id}",
    writes=True,
)
def _send_money(s: Session, receiver_email: str, amount: float, description: str = "") -> Any:
    return {"transaction_id": _transfer(s, s.user, receiver_email, _amount(amount), description)}


@api(
    "payments",
    "show_payment_requests",
    "List payment requests, newest first: received ones ask you to pay, sent ones ask others.",
    [
        Param(
            "status",
            "string",
            "only requests in this status",
            required=False,
            choices=("pending", "approved", "denied"),
        ),
        _DIRECTION,
    ],
    returns="a list of {request_id, requester_email, payer_email, amount, description, status, "
    "created_at, resolved_at}",
    paged=True,
)
def _show_requests(
    s: Session,
    status: str | None = None,
    direction: str | None = None,
    page_index: int = 0,
    page_limit: int = 5,
) -> Any:
    size, offset = paging(page_index, page_limit)
    return s.rows(
        "SELECT * FROM payments_requests WHERE ((? AND requester_email = ?) OR "
        "(? AND payer_email = ?)) AND (? IS NULL OR status = ?) "
        "ORDER BY created_at DESC, request_id DESC LIMIT ? OFFSET ?",
        (
            direction in (None, "sent"),
            s.user,
            direction in (None, "received"),
            s.user,
            status,
            status,
            size,
            offset,
        ),
    )


def _pending(s: Session, request_id: int) -> dict[str, Any]:
    found = s.row(
        "SELECT * FROM payments_requests WHERE request_id = ? AND payer_email = ?",
        (request_id, s.user),
        f"a request {request_id} to you",
    )
    if found["status"] != "pending":
        raise AppError(409, f"request {request_id} is already {found['status']}")
    return found


@api(
    "payments",
    "approve_payment_request",
    "Pay a pending request someone sent you.",
    [Param("request_id", "integer", "the request's id")],
    returns="{transaction_id}",
    writes=True,
)
def _approve(s: Session, request_id: int) -> dict[str, int]:
    found = _pending(s, request_id)
    new = _transfer(
        s, s.user, found["requester_email"], float(found["amount"]), found["description"]
    )
    s.write(
        "UPDATE payments_requests SET status = 'approved', resolved_at = ? WHERE request_id = ?",
        (s.now, request_id),
    )
    return {"transaction_id": new}


@api(
    "payments",
    "deny_payment_request",
    "Deny a pending request someone sent you.",
    [Param("request_id", "integer", "the request's id")],
    returns="{message}",
    writes=True,
)
def _deny(s: Session, request_id: int) -> dict[str, str]:
    _pending(s, request_id)
    s.write(
        "UPDATE payments_requests SET status = 'denied', resolved_at = ? WHERE request_id = ?",
        (s.now, request_id),
    )
    return {"message": f"request {request_id} denied"}


@api(
    "payments",
    "create_payment_request",
    "Ask someone to pay you.",
    [
        Param("user_email", "string", "who should pay"),
        Param("amount", "number", "how much (more than 0, two decimals at most)"),
        Param("description", "string", "what it is for", required=False, default=""),
    ],
    returns="{request_id}",
    writes=True,
)
def _create_request(s: Session, user_email: str, amount: float, description: str = "") -> Any:
    _balance(s, user_email)
    if user_email == s.user:
        raise AppError(422, "you cannot ask yourself for money")
    new = s.write(
        "INSERT INTO payments_requests (requester_email, payer_email, amount, description, "
        "status, created_at) VALUES (?, ?, ?, ?, 'pending', ?)",
        (s.user, user_email, _amount(amount), description, s.now),
    )
    return {"request_id": new}
