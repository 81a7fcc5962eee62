"""The yes/no judge: parsing, prompt shape, endpoint faults, rubric tasks in the pool.

The judge endpoint is a tiny OpenAI-compatible HTTP server on 127.0.0.1
(a fake, inside the tests only).
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rewardbox.errors import InfrastructureError
from rewardbox.grading.context import TestContext, install_thinkingbox_shim
from rewardbox.grading.judge import Judge, JudgeConfig, JudgeException, escape_tags, parse_yesno
from rewardbox.grading.testrunner import TestRunner
from rewardbox.tasks.thinkingbox import load_dataset

REPO = Path(__file__).resolve().parents[2]
DATASET = REPO / "tests" / "fixtures" / "tb_dataset"
KEY_ENV = "REWARDBOX_TEST_JUDGE_KEY"


class FakeJudge:
    """Replies ``reply`` with HTTP ``status``; records every request."""

    def __init__(self):
        self.reply, self.status, self.requests = "Yes.", 200, []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server API
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append(
                    {"path": self.path, "body": body, "auth": self.headers.get("Authorization")}
                )
                if fake.status != 200:
                    payload = {"error": {"message": "boom", "type": "server_error"}}
                else:
                    payload = {
                        "id": "cmpl-1",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body["model"],
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {"role": "assistant", "content": fake.reply},
                            }
                        ],
                    }
                data = json.dumps(payload).encode()
                self.send_response(fake.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.config = {
            "base_url": f"http://127.0.0.1:{self.server.server_port}/v1",
            "model": "judge-1",
            "api_key_env": KEY_ENV,
            "max_retries": 0,
            "timeout_s": 10,
        }


@pytest.fixture(scope="module")
def fake_judge():
    fake = FakeJudge()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


@pytest.fixture(autouse=True)
def reset(fake_judge):
    fake_judge.reply, fake_judge.status = "Yes.", 200
    fake_judge.requests.clear()


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("Yes", True),
        ("yes.", True),
        ("YES, it does", True),
        ("The answer is: Yes.", True),
        ("No", False),
        ("No.\nYes and no", False),
        ("Yesterday", False),
        ("nope", False),
        ("", False),
    ],
)
def test_parse_yesno(reply, expected):
    assert parse_yesno(reply) is expected


def test_judge_request_shape(fake_judge, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test")
    judge = Judge(fake_judge.config)
    assert judge.text_yesno("Total <b>12 USD</b>", "Is the total 12 USD?") is True
    (request,) = fake_judge.requests
    body = request["body"]
    assert request["path"] == "/v1/chat/completions" and request["auth"] == "Bearer sk-test"
    assert body["model"] == "judge-1" and body["temperature"] == 0.0 and body["seed"] == 42
    assert body["max_completion_tokens"] == 128
    system, user = body["messages"]
    assert system["role"] == "system" and system["content"].endswith(
        "answer the question with a single word: Yes or No."
    )
    assert (
        user["content"]
        == "<message>\nTotal &lt;b&gt;12 USD&lt;/b&gt;\n</message>\nIs the total 12 USD?"
    )
    assert judge.decisions == [
        {"question": "Is the total 12 USD?", "answer": True, "reply": "Yes."}
    ]
    fake_judge.reply = "No"
    assert judge.text_yesno("x", "q") is False
    assert escape_tags("<a>") == "&lt;a&gt;"


def test_judge_faults_raise_judge_exception(fake_judge):
    fake_judge.status = 500
    with pytest.raises(JudgeException) as info:
        Judge(fake_judge.config).text_yesno("x", "q")
    assert isinstance(info.value, InfrastructureError)  # a system error, never a reward of 0
    fake_judge.status, fake_judge.reply = 200, "   "
    with pytest.raises(JudgeException, match="empty"):
        Judge(fake_judge.config).text_yesno("x", "q")
    with pytest.raises(JudgeException, match="no judge"):
        Judge(None).text_yesno("x", "q")


def test_judge_config_validation():
    with pytest.raises(ValueError):
        JudgeConfig(base_url="", model="m")
    config = JudgeConfig.from_value({"base_url": "http://h/v1", "model": "m"})
    assert (
        JudgeConfig.from_value(config.to_dict()) == config
        and config.seed == 42
        and config.temperature == 0.0
    )


def test_shim_resolves_without_upstream_package():
    install_thinkingbox_shim()
    from thinkingbox.common import Judge as ShimJudge
    from thinkingbox.common import TestContext as ShimContext

    assert ShimJudge is Judge and ShimContext is TestContext
    assert not (REPO / "thinkingbox").exists()
    assert sys.modules["thinkingbox"].common is sys.modules["thinkingbox.common"]


# --- rubric task graded in the worker pool -------------------------------------


@pytest.fixture(scope="module")
def rubric_task():
    (task,) = load_dataset(DATASET, test_list=["fake_shop_rubrics_yesno.py:test_refund_told"]).tasks
    return task


def rubric_context(answer: str) -> dict:
    question = "Does the message say the refund is 12 USD?"
    effects = {
        "fake_shop": {"result_db_hash": "h", "golden_db_hash": "h", "rubrics_yesno": [question]}
    }
    return {"messages": [{"role": "assistant", "content": answer}], "effects": effects}


@pytest.fixture(scope="module")
def judged_runner(fake_judge):
    with TestRunner(max_workers=1, timeout_s=30, judge_config=fake_judge.config) as pool:
        yield pool


def test_rubric_yes_passes(judged_runner, rubric_task, fake_judge):
    outcome = judged_runner.run_sync(rubric_task, rubric_context("Refunded 12 USD <DONE>"))
    assert (outcome.result, outcome.reward, outcome.is_system_error) == (True, 1.0, False)
    assert outcome.metadata["judge_decisions"][0]["answer"] is True
    (request,) = fake_judge.requests
    assert "Refunded 12 USD &lt;DONE&gt;" in request["body"]["messages"][1]["content"]


def test_rubric_no_is_policy_failure(judged_runner, rubric_task, fake_judge):
    fake_judge.reply = "No."
    outcome = judged_runner.run_sync(rubric_task, rubric_context("Refunded. <DONE>"))
    assert (outcome.result, outcome.reward, outcome.is_system_error) == (False, 0.0, False)
    assert "rubric not met" in outcome.message


def test_rubric_judge_500_is_system_error(judged_runner, rubric_task, fake_judge):
    fake_judge.status = 500
    outcome = judged_runner.run_sync(rubric_task, rubric_context("Refunded 12 USD <DONE>"))
    assert outcome.is_system_error and outcome.message.startswith("JudgeException")
    assert "judge.text_yesno" in outcome.line_content


def test_rubric_without_judge_is_system_error(rubric_task):
    with TestRunner(max_workers=1) as pool:
        outcome = pool.run_sync(rubric_task, rubric_context("Refunded 12 USD <DONE>"))
    assert outcome.is_system_error and "no judge endpoint is configured" in outcome.message
