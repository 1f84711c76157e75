"""Serve JSON-RPC over stdio so that every request read is answered before the end.

A client may send its last request and close its end of stdin at once (a script piping
requests in). An SDK server that reads end-of-file stops and cancels what is still being
handled, so the last answer is lost. :func:`answer_all` runs a server with its fd 0 and
fd 1 relayed through pipes: the requests read are counted by id, and the server sees the
end of its input only when each of them has had its response written out (or the server
has stopped on its own).

What it does not do: it does not parse or alter messages beyond reading their ids, and a
request the server never answers keeps the process waiting, as a client that kept its
stdin open would.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["answer_all"]


class _Pending:
    """Ids of requests read and not yet answered."""

    def __init__(self) -> None:
        self._ids: set[str] = set()
        self._cond = threading.Condition()
        self._stopped = False

    def add(self, key: str) -> None:
        with self._cond:
            self._ids.add(key)

    def answered(self, key: str) -> None:
        with self._cond:
            self._ids.discard(key)
            self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def wait_answered(self) -> None:
        with self._cond:
            self._cond.wait_for(lambda: not self._ids or self._stopped)


def _messages(line: bytes) -> Iterator[dict[str, Any]]:
    try:
        data = json.loads(line)
    except ValueError:
        return
    for item in data if isinstance(data, list) else [data]:
        if isinstance(item, dict) and item.get("id") is not None:
            yield item


def _key(msg: dict[str, Any]) -> str:
    return json.dumps(msg["id"])


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _feed(source: int, sink: int, pending: _Pending) -> None:
    """Client to server: count the requests, and close the server's input only once
    every one of them is answered."""
    try:
        with os.fdopen(source, "rb", closefd=False) as lines:
            for line in lines:
                for msg in _messages(line):
                    if "method" in msg:
                        pending.add(_key(msg))
                _write(sink, line)
        pending.wait_answered()
    except OSError:
        pass
    finally:
        os.close(sink)


def _drain(source: int, sink: int, pending: _Pending) -> None:
    """Server to client: pass every line on, then mark the responses in it answered."""
    with os.fdopen(source, "rb") as lines:
        for line in lines:
            _write(sink, line)
            for msg in _messages(line):
                if "method" not in msg and ("result" in msg or "error" in msg):
                    pending.answered(_key(msg))


def answer_all(serve: Callable[[], None]) -> None:
    """Run ``serve()`` (a stdio server) answering every request read before it stops."""
    sys.stdout.flush()
    client_in, client_out = os.dup(0), os.dup(1)
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    os.dup2(in_r, 0)
    os.dup2(out_w, 1)
    os.close(in_r)
    os.close(out_w)
    pending = _Pending()
    feeder = threading.Thread(target=_feed, args=(client_in, in_w, pending), daemon=True,
                              name="stdio-feed")
    drainer = threading.Thread(target=_drain, args=(out_r, client_out, pending), daemon=True,
                               name="stdio-drain")
    feeder.start()
    drainer.start()
    try:
        serve()
    finally:
        pending.stop()
        sys.stdout.flush()
        os.dup2(client_out, 1)  # the server's end of the pipe closes: the drain ends
        drainer.join(timeout=10)
