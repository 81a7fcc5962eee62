"""``ServingConfig``: whether and how a checkpoint is served by vLLM for evaluation and probes."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# Model family -> vLLM ``--tool-call-parser`` name (vLLM docs, "Tool Calling"). ``rewardbox``: a checkpoint
# with our chat template (``policy/chat_template.jinja``), which writes Hermes-style
# ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` JSON, as Qwen2.5/Qwen3 and SmolLM3 do.
TOOL_CALL_PARSERS: dict[str, str] = {
    "rewardbox": "hermes",
    "smollm": "hermes",
    "qwen": "hermes",
    "hermes": "hermes",
    "llama3": "llama3_json",
    "mistral": "mistral",
}
# Families whose calls our interpreter reads in text, so the parser-parity check can replay vLLM's parsing.
HERMES_PARSER = "hermes"


class ServingConfig(BaseModel):
    """How the evaluation and probe assets serve a checkpoint (profile section ``serving:``).

    With ``kind: vllm`` the ``vllm_server`` resource starts ``vllm serve <checkpoint>`` for the step, points an
    ``endpoint`` policy at it, and stops it after. Where vLLM cannot run (no GPU, no ``vllm`` executable) the
    assets use the profile's ``policy`` and log why.

    Attributes:
        kind: ``none`` (default: the profile's ``policy`` as it is) or ``vllm``.
        executable: the ``vllm`` command (a name on ``PATH`` or a path).
        model_family: picks the tool-call parser from ``TOOL_CALL_PARSERS`` (``rewardbox``: our template).
        tool_call_parser: overrides the family's parser (any name ``vllm serve --tool-call-parser`` accepts).
        chat_template: a Jinja file for ``--chat-template``; None uses ``policy/chat_template.jinja`` (the
            template training renders prompts with), so served prompts match training prompts.
        reasoning_parser: vLLM's ``--reasoning-parser`` (e.g. ``qwen3``), None for none. Without one, the
            server's tool parser also reads text inside ``<think>`` (the parity check reports that case).
        served_model_name: the model name requests use.
        host: the interface the server binds; the endpoint URL uses it.
        port: None picks a free port.
        dtype, max_model_len, gpu_memory_utilization: passed to ``vllm serve`` when set.
        extra_args: further ``vllm serve`` arguments, verbatim.
        startup_timeout_s: how long to wait for ``/health`` to answer 200, seconds (weights load first).
        health_poll_s: delay between two ``/health`` polls, seconds.
        shutdown_timeout_s: how long SIGTERM may take before SIGKILL, seconds.
        require_gpu: skip serving on a machine where ``torch.cuda.is_available()`` is False.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, protected_namespaces=())

    kind: Literal["none", "vllm"] = "none"
    executable: str = "vllm"
    model_family: Literal["rewardbox", "smollm", "qwen", "hermes", "llama3", "mistral"] = (
        "rewardbox"
    )
    tool_call_parser: str | None = None
    chat_template: str | None = None
    reasoning_parser: str | None = None
    served_model_name: str = "rewardbox-policy"
    host: str = "127.0.0.1"
    port: int | None = Field(None, ge=1, le=65535)
    dtype: str = "auto"
    max_model_len: int | None = Field(None, ge=1)
    gpu_memory_utilization: float | None = Field(None, gt=0.0, le=1.0)
    extra_args: list[str] = Field(default_factory=list)
    startup_timeout_s: float = Field(900.0, gt=0)
    health_poll_s: float = Field(1.0, gt=0)
    shutdown_timeout_s: float = Field(30.0, gt=0)
    require_gpu: bool = True

    @model_validator(mode="after")
    def _check_args(self) -> ServingConfig:
        owned = {"--port", "--host", "--tool-call-parser", "--chat-template", "--served-model-name"}
        clash = sorted(a.split("=", 1)[0] for a in self.extra_args if a.split("=", 1)[0] in owned)
        if clash:
            raise ValueError(
                f"serving.extra_args sets {clash}: use the serving fields of the same name instead"
            )
        return self

    @property
    def parser(self) -> str:
        """The ``--tool-call-parser`` name: ``tool_call_parser`` when set, else the family's."""
        return self.tool_call_parser or TOOL_CALL_PARSERS[self.model_family]
