"""The endpoint preflight: one GET /models per endpoint; unreachable, erroring or wrong-model endpoints named."""

from __future__ import annotations

import socket

import pytest

from rewardbox.policy.preflight import Endpoint, EndpointPreflightError, preflight


def dead_url() -> str:
    """A loopback URL where nothing listens (a port bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_a_served_model_passes_with_one_request_per_url_and_the_key(fake_openai):
    fake_openai.models = ["agent", "user"]
    preflight(
        [
            Endpoint("policy", fake_openai.base_url, "agent", "k-1"),
            Endpoint("user simulator", fake_openai.base_url + "/", "user", "k-1"),
        ]
    )
    assert [r["path"] for r in fake_openai.model_requests] == ["/v1/models"]
    assert (
        fake_openai.model_requests[0]["authorization"] == "Bearer k-1" and not fake_openai.requests
    )


def test_an_unreachable_endpoint_is_named_with_its_role_url_and_model():
    url = dead_url()
    with pytest.raises(EndpointPreflightError) as err:
        preflight([Endpoint("judge", url, "j")], timeout_s=2)
    assert f"judge endpoint {url} (model 'j'): unreachable (ConnectError" in str(err.value)


def test_a_wrong_model_lists_what_is_served(fake_openai):
    fake_openai.models = ["qwen3-8b"]
    with pytest.raises(
        EndpointPreflightError,
        match=r"model 'qwen3-8B' is not served there \(it serves: qwen3-8b\)",
    ):
        preflight([Endpoint("policy", fake_openai.base_url, "qwen3-8B")])


def test_an_error_status_or_a_body_that_is_not_a_model_list_fails(fake_openai):
    with pytest.raises(EndpointPreflightError, match="answered HTTP 404"):
        preflight(
            [Endpoint("policy", fake_openai.base_url.removesuffix("/v1") + "/nope", "fake-model")]
        )
    fake_openai.models = None  # the fake then answers {"data": null}
    with pytest.raises(EndpointPreflightError, match="did not answer a model list"):
        preflight([Endpoint("policy", fake_openai.base_url, "fake-model")])


def test_the_key_never_reaches_the_message_or_repr(fake_openai):
    fake_openai.models = []
    endpoint = Endpoint("policy", fake_openai.base_url, "m", "sk-secret-123")
    with pytest.raises(EndpointPreflightError) as err:
        preflight([endpoint])
    assert "sk-secret-123" not in str(err.value) and "sk-secret-123" not in repr(endpoint)
