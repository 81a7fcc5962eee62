"""Endpoint preflight: one ``GET <base_url>/models`` per endpoint before a step runs any episode.

A step that uses OpenAI-compatible endpoints (the policy, the reference policy, the user simulator,
the judge, a vLLM server once started) asks each one, before its first episode, whether it answers
and serves the model the profile names. An endpoint that is down, answers an error, or does not list
the model fails the step at once with the role, the URL, the model and the error: a configuration
fault that every episode would meet, so it is not retried episode by episode as system errors
(which would turn a whole campaign into system errors and, at best, a failed gate much later).

``GET /v1/models`` is part of the OpenAI API that vLLM, SGLang, llama.cpp's server, LiteLLM and
OpenAI itself serve; its ``data[].id`` lists the served model names (vLLM: ``--served-model-name``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import httpx

PREFLIGHT_TIMEOUT_S = 10.0
"""How long one preflight request may take, seconds (connect and read)."""


@dataclass(frozen=True)
class Endpoint:
    """One endpoint a step will call.

    Attributes:
        role: ``policy``, ``reference policy``, ``user simulator``, ``judge`` (for the message).
        base_url: the OpenAI-compatible base URL, e.g. ``http://127.0.0.1:8000/v1``.
        model: the model name the step sends.
        api_key: the key sent as ``Authorization: Bearer`` (never part of any message), or None.
    """

    role: str
    base_url: str
    model: str
    api_key: str | None = None

    def __repr__(self) -> str:  # the key never reaches a log line or a traceback
        return f"Endpoint(role={self.role!r}, base_url={self.base_url!r}, model={self.model!r})"


class EndpointPreflightError(RuntimeError):
    """An endpoint a step needs is unreachable, answers an error, or does not serve the named model.

    A configuration fault, raised before any episode: the step fails and writes nothing. The
    message names the role, the URL, the model and the error.

    Attributes:
        endpoint: the endpoint that failed.
    """

    def __init__(self, endpoint: Endpoint, error: str):
        self.endpoint = endpoint
        super().__init__(
            f"{endpoint.role} endpoint {endpoint.base_url} (model {endpoint.model!r}): {error}; "
            "no episode was run"
        )


def served_models(endpoint: Endpoint, client: httpx.Client) -> list[str]:
    """The model ids ``GET <base_url>/models`` lists.

    Raises:
        EndpointPreflightError: no answer, a non-2xx status, or a body that is not a model list.
    """
    url = endpoint.base_url.rstrip("/") + "/models"
    headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
    try:
        response = client.get(url, headers=headers)
    except httpx.HTTPError as exc:
        raise EndpointPreflightError(
            endpoint, f"unreachable ({type(exc).__name__}: {exc})"
        ) from exc
    if response.status_code >= 400:
        raise EndpointPreflightError(
            endpoint, f"GET {url} answered HTTP {response.status_code}: {response.text[:200]}"
        )
    try:
        data = response.json()["data"]
        return [str(item["id"]) for item in data]
    except (ValueError, KeyError, TypeError) as exc:
        raise EndpointPreflightError(
            endpoint,
            f"GET {url} did not answer a model list "
            f"({type(exc).__name__}: {exc}): {response.text[:200]}",
        ) from exc


def preflight(endpoints: Iterable[Endpoint], timeout_s: float = PREFLIGHT_TIMEOUT_S) -> None:
    """Check every endpoint answers and serves its model; one request per distinct (URL, model).

    Raises:
        EndpointPreflightError: the first endpoint that fails, with its role, URL, model and the error
            (unreachable, HTTP status, or the models it does serve).
    """
    seen: dict[str, list[str]] = {}
    with httpx.Client(timeout=timeout_s) as client:
        for endpoint in endpoints:
            key = endpoint.base_url.rstrip("/")
            if key not in seen:
                seen[key] = served_models(endpoint, client)
            if endpoint.model not in seen[key]:
                listed = ", ".join(seen[key][:10]) or "none"
                raise EndpointPreflightError(
                    endpoint, f"model {endpoint.model!r} is not served there (it serves: {listed})"
                )
