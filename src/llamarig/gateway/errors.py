"""The gateway's branch of the project's error tree (llamarig.errors).

- :class:`GatewayError` (a LlamarigError): an error the gateway answers over HTTP, with a status
  and an OpenAI-style body;
  - :class:`RequestError`: the request cannot be served as sent (4xx), or its backend failed
    before the answer started (502);
  - :class:`Rejected`: not admitted now (429 queue full / timeout / key limit / busy, 503 no
    backend), with Retry-After (and how it was estimated) and the real cause (``reason`` and its numbers, llamarig.gateway.reasons);
- :class:`BackendError` (a ServerError): a backend answered its health or ``/props`` check with
  something the gateway cannot use; the backend is marked failed, nothing reaches a client.

The upstream client's errors (llamarig.gateway.upstream.UpstreamError and its subclasses) are
ServerErrors too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llamarig.errors import LlamarigError, ServerError


class GatewayError(LlamarigError):
    """An error answered over HTTP: ``status`` and :meth:`body` (OpenAI's error shape)."""

    status: int = 500

    def body(self) -> dict[str, Any]:
        return {"error": {"message": str(self), "type": "server_error", "param": None, "code": None}}


class RequestError(GatewayError):
    """A client error (or a failed backend before the answer started) turned into an OpenAI-style
    error body."""

    def __init__(self, status: int, message: str, *, type_: str = "invalid_request_error",
                 code: str | None = None, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.code = code
        self.param = param

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class Rejected(GatewayError):
    """Not admitted: HTTP ``status`` (429 or 503), a short ``code`` (what happened), a message,
    Retry-After, and the real cause: ``reason`` (a code of llamarig.gateway.reasons; ``code``
    when not given) with ``details``, the numbers behind it."""

    def __init__(self, status: int, code: str, message: str, retry_after: int, *, reason: str | None = None,
                 details: Mapping[str, Any] | None = None, estimate: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after
        self.reason = reason or code
        self.details: dict[str, Any] = dict(details or {})
        #: how ``retry_after`` was found (llamarig.gateway.retry.Estimate.to_json, or the fallback)
        self.estimate: dict[str, Any] = dict(estimate or {})

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": "rate_limit_error" if self.status == 429 else "server_error",
                          "param": None, "code": self.code, "retry_after": self.retry_after,
                          "retry_after_estimate": self.estimate, "reason": self.reason, "details": self.details}}


class BackendError(ServerError):
    """A backend's health check or ``/props`` answer is unusable (non-200, fields missing)."""
