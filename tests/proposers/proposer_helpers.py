"""Shared helpers for the proposer tests: temp git repos and a scripted LLM HTTP server.

The server speaks two wire formats on 127.0.0.1:

- OpenAI chat completions: ``POST /v1/chat/completions``
- Anthropic messages: ``POST /v1/messages``

Each request takes the next scripted step: a reply text, an HTTP error, or a callable that
builds a step from the request. Every request is recorded.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from assay.bench.meter import Caps, Meter
from assay.config.prices import for_target
from assay.config.spec import Target, parse
from assay.journal.store import Journal
from assay.model import Candidate, Incumbent
from assay.proposers.base import ProposalContext
from assay.usage import Spent, Usage


def sh(cwd: Path, *args: str) -> str:
    return subprocess.run(list(args), cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


def make_repo(root: Path, files: dict[str, str], config: str) -> str:
    """A git repo at ``root`` holding ``files`` and assay.toml; returns the commit."""
    root.mkdir(parents=True, exist_ok=True)
    sh(root, "git", "init", "-q", "-b", "main")
    sh(root, "git", "config", "user.email", "test@example.com")
    sh(root, "git", "config", "user.name", "test")
    sh(root, "git", "config", "commit.gpgsign", "false")
    for path, text in {**files, "assay.toml": config}.items():
        f = root / path
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    (root / ".gitignore").write_text(".assay/\n__pycache__/\n")
    sh(root, "git", "add", "-A")
    sh(root, "git", "commit", "-q", "-m", "init")
    return sh(root, "git", "rev-parse", "HEAD").strip()


def target_of(root: Path) -> Target:
    return parse((root / "assay.toml").read_text(), root)


def context_of(target: Target, commit: str, **kw: Any) -> ProposalContext:
    files = kw.pop("files", None)
    if files is None:
        files = {p: (target.root / p).read_text() for p in tracked(target.root)
                 if target.is_editable(p) and not target.is_protected(p)}
    kw.setdefault("meter", Meter(for_target(target)))  # uncapped, unrecorded
    return ProposalContext(target=target, incumbent=Incumbent(commit), files=files, **kw)


def journaled(target: Target, caps: Caps = Caps()) -> tuple[Journal, Meter]:
    """A real journal and a meter that records each call in its model_calls table."""
    journal = Journal.open(target.root.parent / "journal.sqlite")
    return journal, Meter(for_target(target), caps,
                          record=lambda u, call: journal.add_model_call(u, call, "s1"))


def calls_of(journal: Journal, cand: Candidate) -> tuple[Spent, list[Usage]]:
    """The candidate's model calls as the journal holds them once it is an experiment."""
    exp = journal.add_experiment(cand)
    return (journal.spent_by_experiment([exp.id]).get(exp.id, Spent()),
            journal.model_calls(experiment_id=exp.id))


def tracked(root: Path) -> list[str]:
    return [p for p in sh(root, "git", "ls-files").splitlines() if p]


def applies(root: Path, patch: str) -> bool:
    proc = subprocess.run(["git", "apply", "--check", "-"], cwd=root, input=patch, text=True,
                          capture_output=True)
    return proc.returncode == 0


APP = '''\
import time


def work(n):
    total = 0
    for i in range(n):
        total += i * i
    return total


def main():
    start = time.perf_counter()
    work(100000)
    print("elapsed", time.perf_counter() - start)
'''

BENCH = "from src.app import main\nmain()\n"


def config_text(llm: str = "", agent: str = "", extra: str = "") -> str:
    out = """\
[target]
brief = "program.md"

[metric]
name = "score"
direction = "maximize"

[commands]
bench = "python bench.py"

[scope]
editable = ["src/**/*.py"]
protected = ["bench.py"]
"""
    if llm:
        out += "\n[proposer.llm]\n" + llm
    if agent:
        out += "\n[proposer.agent]\n" + agent
    return out + extra


GOOD_EDIT = """\
HYPOTHESIS: a closed-form sum of squares replaces the loop, so work() is O(1)

src/app.py
```python
<<<<<<< SEARCH
    total = 0
    for i in range(n):
        total += i * i
    return total
=======
    return (n - 1) * n * (2 * n - 1) // 6
>>>>>>> REPLACE
```
"""


# ------------------------------------------------------------------ the scripted server

Step = Any  # str (reply text) | Err | Callable[[dict], Step]


@dataclass
class Err:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    message: str = "scripted error"


@dataclass
class Reply:
    text: str
    finish: str = ""  # "" = normal stop
    tokens_in: int | None = 1000  # every input token, cached ones included
    tokens_out: int | None = 200
    cached: int = 0  # read from the prompt cache (part of tokens_in)
    cache_write: int = 0  # written to the prompt cache (part of tokens_in; Anthropic only)


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    def texts(self) -> list[str]:
        """Every message's content, the system prompt first."""
        out = []
        if isinstance(self.body.get("system"), str):
            out.append(self.body["system"])
        for m in self.body.get("messages", []):
            out.append(m["content"] if isinstance(m["content"], str)
                       else json.dumps(m["content"]))
        return out

    @property
    def last_user(self) -> str:
        return [m for m in self.body["messages"] if m["role"] == "user"][-1]["content"]


class LLMServer:
    """A threaded HTTP server with scripted replies in both wire formats."""

    def __init__(self, steps: Iterable[Step] = (), default: Step | None = None) -> None:
        self.steps: list[Step] = list(steps)
        self.default = default
        self.requests: list[Request] = []
        self.model = ""  # the model the replies name ('' = the one asked for)
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                req = Request(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                with server._lock:
                    server.requests.append(req)
                    if server.steps:
                        step = server.steps.pop(0)
                    elif server.default is not None:
                        step = server.default
                    else:
                        step = Err(500, message="no scripted reply left")
                while callable(step):
                    step = step(req)
                if isinstance(step, str):
                    step = Reply(step)
                if server.model:
                    body = {**body, "model": server.model}
                if self.path.endswith("/chat/completions"):
                    status, payload, headers = _openai(step, body)
                elif self.path.endswith("/messages"):
                    status, payload, headers = _anthropic(step, body)
                else:
                    status, payload, headers = 404, {"error": {"message": "no route"}}, {}
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LLMServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


def _openai(step: Reply | Err, body: dict[str, Any]) -> tuple[int, dict[str, Any],
                                                             dict[str, str]]:
    if isinstance(step, Err):
        return step.status, {"error": {"message": step.message, "type": "scripted",
                                       "code": step.status}}, step.headers
    usage = None
    if step.tokens_in is not None:  # the fields of OpenAI's chat completions usage object
        usage = {"prompt_tokens": step.tokens_in, "completion_tokens": step.tokens_out,
                 "total_tokens": step.tokens_in + (step.tokens_out or 0),
                 "prompt_tokens_details": {"cached_tokens": step.cached, "audio_tokens": 0},
                 "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                               "accepted_prediction_tokens": 0,
                                               "rejected_prediction_tokens": 0}}
    return 200, {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0,
        "model": body.get("model", ""),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": step.text},
                     "finish_reason": step.finish or "stop"}],
        **({"usage": usage} if usage else {}),
    }, {}


def _anthropic(step: Reply | Err, body: dict[str, Any]) -> tuple[int, dict[str, Any],
                                                                dict[str, str]]:
    if isinstance(step, Err):
        return step.status, {"type": "error", "error": {"type": "scripted",
                                                        "message": step.message}}, step.headers
    return 200, {
        "id": "msg_1", "type": "message", "role": "assistant",
        "model": body.get("model", ""),
        "content": [{"type": "text", "text": step.text}],
        "stop_reason": {"length": "max_tokens"}.get(step.finish, step.finish or "end_turn"),
        "stop_sequence": None,
        # Anthropic's input_tokens leaves out the tokens read from or written to the cache
        "usage": {"input_tokens": (step.tokens_in or 0) - step.cached - step.cache_write,
                  "cache_read_input_tokens": step.cached,
                  "cache_creation_input_tokens": step.cache_write,
                  "output_tokens": step.tokens_out or 0},
    }, {}


def noop_sleep_recorder() -> tuple[list[float], Callable[[float], None]]:
    delays: list[float] = []
    return delays, delays.append
