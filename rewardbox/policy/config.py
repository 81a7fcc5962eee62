"""``PolicyConfig``: which policy to build, validated with errors that say how to fix them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

POLICY_KINDS = ("local", "endpoint", "golden", "null", "scripted_mix")

KIND_FIELDS: dict[str, tuple[str, ...]] = {
    "local": (
        "checkpoint_dir",
        "adapter_dir",
        "max_batch_size",
        "batch_wait_ms",
        "device",
        "dtype",
        "seed",
        "num_threads",
        "name",
        "guided_tool_calls",
        "kv_cache_mib",
        "pack_weights",
        "shared_prefix",
    ),
    "endpoint": (
        "base_url",
        "model",
        "api_key_env",
        "timeout_s",
        "max_retries",
        "max_timeout_retries",
        "max_rate_limit_retries",
        "reasoning_field",
        "reasoning_open",
        "extra_body",
        "name",
        "context_tokens",
    ),
    "scripted_mix": ("golden_frac",),
    "golden": (),
    "null": (),
}
"""The fields each kind's policy class takes, by the constructor's own argument names."""

REMOVED_KEYS = {
    "temperature": "episode.temperature (probes, screening, evaluation) or grpo.temperature (GRPO rollouts)",
    "max_new_tokens": "episode.max_new_tokens",
}
"""Keys this model no longer has -> the profile key that replaced each."""


class PolicyConfig(BaseModel):
    """One policy's settings. Unknown keys are rejected (a typo never passes silently).

    Attributes:
        kind: ``local`` (transformers in-process), ``endpoint`` (OpenAI-compatible
            server), ``golden`` (replays reference actions), ``null`` (does nothing), ``scripted_mix`` (golden or null per episode).
        name: policy name for records (default: checkpoint dir name / model / kind).
        checkpoint_dir: local only; a Hugging Face directory (base or merged checkpoint).
            In a profile it is usually left unset: the pipeline passes the
            ``base_checkpoint`` / ``merged_checkpoint`` asset's directory.
        adapter_dir: local only; an optional PEFT adapter merged on load.
        device, dtype: local only; where and how weights live. ``dtype: auto`` (default) is
            bfloat16 where the device has bf16 matrix units (CUDA with bf16, a CPU with AMX or
            AVX512-BF16) and float32 elsewhere (``rewardbox.policy.precision``).
        max_batch_size: local only; most requests per batched ``generate``.
        kv_cache_mib: local only; most memory the running batch's KV cache may reserve, MiB
            (rows x (prompt width + budget) x bytes per position); a request that would exceed it
            waits for rows to finish (a lone request always runs). None: ``max_batch_size`` alone.
        pack_weights: local only; bf16 weights on a CPU with bf16 units are packed once for oneDNN
            and decode steps multiply the packed copies (``policy/packed_linear.py``; one more copy
            of the weights while decoding). False: plain ``F.linear`` everywhere.
        shared_prefix: local only; rows that start with one cached prefix keep it once and a decode
            step reads it once for them (``policy/attention.py``, shared-prefix attention; on a CPU).
            False: a copy of the prefix in every row's KV cache.
        batch_wait_ms: local only; how long to wait for more requests, ms.
        num_threads: local only; torch threads: a count, ``auto`` (default: measured at start on
            one decode layer, attention included, in the model's dtype) or None (leave torch's);
            passive OpenMP waits either way (``rewardbox.threads``).
        seed: local only; seeds sampling per batch (None: unseeded).
        guided_tool_calls: local only; restrict tool-call names and argument keys
            to the request's tools while they are written (``policy/guided.py``).
        base_url, model: endpoint only; e.g. ``http://127.0.0.1:8000/v1`` and the served name.
        api_key_env: endpoint only; the environment variable holding the key.
        timeout_s: endpoint only; per-attempt timeout, seconds.
        max_retries, max_timeout_retries, max_rate_limit_retries: endpoint only;
            retries on 5xx, on timeouts/connection errors, on 429 (None: unlimited)
            (docs/thinkingbox.md, "Retries").
        reasoning_field: endpoint only; message field that carries reasoning.
        reasoning_open: endpoint only; the served chat template ends its generation
            prompt inside an opened ``<think>`` (DeepSeek-R1 style) and the server
            runs no reasoning parser, so ``content`` starts mid-reasoning. False
            (the default) for servers that split reasoning out or never open it.
        extra_body: endpoint only; extra request fields (e.g. ``reasoning_effort``).
        context_tokens: endpoint only; the served context (prompt + completion), tokens; None
            reads it from the server (docs/scale.md, "Context limits").
        golden_frac: scripted_mix only; share of episodes that replay the golden
            actions (the rest do nothing), for tests and CI without a model.

    Sampling is not a policy setting: each request carries its temperature and token budget,
    set by purpose (``episode.temperature``/``episode.max_new_tokens`` for probes, screening
    and evaluation, ``grpo.temperature`` for GRPO rollouts). The keys ``temperature`` and
    ``max_new_tokens`` are refused here with the key to set instead (they used to override
    every request silently).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, protected_namespaces=())

    kind: Literal["local", "endpoint", "golden", "null", "scripted_mix"]
    name: str | None = None
    checkpoint_dir: Path | None = None
    adapter_dir: Path | None = None
    device: str = "cpu"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    max_batch_size: int = Field(8, ge=1)
    kv_cache_mib: int | None = Field(2048, ge=1)
    pack_weights: bool = True
    shared_prefix: bool = True
    batch_wait_ms: float = Field(20.0, ge=0)
    num_threads: Annotated[int, Field(ge=1)] | Literal["auto"] | None = "auto"
    seed: int | None = None
    guided_tool_calls: bool = True
    base_url: str | None = None
    model: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = Field(600.0, gt=0)
    max_retries: int = Field(5, ge=0)
    max_timeout_retries: int = Field(10, ge=0)
    max_rate_limit_retries: int | None = Field(None, ge=0)
    reasoning_field: str = "reasoning_content"
    reasoning_open: bool = False
    extra_body: dict[str, Any] = Field(default_factory=dict)
    context_tokens: int | None = Field(None, ge=2)
    golden_frac: float = Field(0.5, ge=0.0, le=1.0)

    @model_validator(mode="before")
    @classmethod
    def _refuse_removed_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            removed = [key for key in REMOVED_KEYS if key in data]
            if removed:
                raise ValueError(
                    "; ".join(
                        f"policy.{key} was removed: set {REMOVED_KEYS[key]}" for key in removed
                    )
                )
        return data

    def constructor_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of this kind's policy class (``KIND_FIELDS``), values as validated."""
        return {field: getattr(self, field) for field in KIND_FIELDS[self.kind]}

    @model_validator(mode="after")
    def _check_kind_fields(self) -> PolicyConfig:
        if self.kind == "endpoint":
            missing = [f for f in ("base_url", "model") if not getattr(self, f)]
            if missing:
                raise ValueError(
                    f"kind 'endpoint' needs {' and '.join(missing)}: e.g. base_url='http://127.0.0.1:8000/v1', "
                    "model='<served model name>'"
                )
            if not self.base_url.startswith(("http://", "https://")):
                raise ValueError(f"base_url {self.base_url!r} must start with http:// or https://")
        return self
