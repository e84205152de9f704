"""The proxy's SSE reader and deadline arithmetic, on their own (no sockets)."""

from __future__ import annotations

import json

import pytest

from infersight.instrumentation.proxy.deadlines import Deadlines, Timeouts, Watchdog
from infersight.instrumentation.proxy.sse import StreamInspector, inspect_json_body


def chunk(content=None, *, text=None, finish=None, usage=None, choices=True) -> bytes:
    payload: dict = {"id": "c1", "model": "m", "object": "chat.completion.chunk"}
    if choices:
        choice: dict = {"index": 0, "finish_reason": finish}
        if text is not None:
            choice["text"] = text
        else:
            choice["delta"] = {} if content is None else {"content": content}
        payload["choices"] = [choice]
    else:
        payload["choices"] = []
    if usage is not None:
        payload["usage"] = usage
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


STREAM = (chunk("") + chunk("Hel") + chunk("lo") + chunk(finish="stop")
          + chunk(choices=False, usage={"prompt_tokens": 9, "completion_tokens": 2,
                                        "prompt_tokens_details": {"cached_tokens": 4}})
          + b"data: [DONE]\n\n")


def test_counts_token_events_and_reads_usage():
    inspector = StreamInspector()
    assert inspector.feed(STREAM) == 2  # the empty role chunk and the finish chunk carry no token
    inspector.finish()
    facts = inspector.facts
    assert (facts.model, facts.response_id, facts.finish_reasons) == ("m", "c1", ["stop"])
    assert (facts.input_tokens, facts.output_tokens, facts.cached_input_tokens) == (9, 2, 4)
    assert inspector.done and facts.malformed is None and facts.upstream_error is None


@pytest.mark.parametrize("size", [1, 2, 7, 64])
def test_any_chunking_gives_the_same_answer(size):
    """TCP may split events anywhere, even inside a CRLF pair."""
    crlf = STREAM.replace(b"\n", b"\r\n")
    for stream in (STREAM, crlf):
        inspector = StreamInspector()
        tokens = sum(inspector.feed(stream[i:i + size]) for i in range(0, len(stream), size))
        inspector.finish()
        assert tokens == 2
        assert inspector.facts.malformed is None, inspector.facts.malformed
        assert inspector.facts.output_tokens == 2


def test_completions_text_and_comments():
    inspector = StreamInspector()
    stream = b": keep-alive\n\n" + chunk(text="a") + chunk(text="") + b"event: message\ndata: [DONE]\n\n"
    assert inspector.feed(stream) == 1
    inspector.finish()
    assert inspector.facts.malformed is None


@pytest.mark.parametrize("body, why", [
    (b"<html>502 Bad Gateway</html>\n\n", "not an SSE field line"),
    (b"data: {not json\n\n", "not JSON"),
    (b"data: [1, 2]\n\n", "not a JSON object"),
])
def test_garbage_is_flagged_not_fatal(body, why):
    inspector = StreamInspector()
    assert inspector.feed(body + chunk("x")) == 1  # later good events still count
    assert why in inspector.facts.malformed


def test_cut_off_stream_is_malformed():
    inspector = StreamInspector()
    inspector.feed(chunk("a") + b"data: {\"choi")
    assert inspector.partial
    inspector.finish()
    assert "inside an event" in inspector.facts.malformed


def test_an_endless_event_does_not_grow_memory():
    inspector = StreamInspector()
    inspector.feed(chunk("a"))
    for _ in range(40):
        inspector.feed(b"data: " + b"x" * 64 * 1024)  # 2.5 MiB with no blank line
    assert inspector.gave_up and not inspector.partial
    assert "over 1,048,576 bytes" in inspector.facts.malformed
    assert inspector.feed(chunk("b")) == 0  # not read any more


def test_missing_done_is_malformed():
    inspector = StreamInspector()
    inspector.feed(chunk("a"))
    inspector.finish()
    assert "[DONE]" in inspector.facts.malformed


def test_in_stream_error_object_is_read():
    inspector = StreamInspector()
    inspector.feed(b'data: {"error": {"message": "engine died", "type": "x"}}\n\n')
    inspector.finish()
    assert inspector.facts.upstream_error == "engine died"
    assert inspector.facts.malformed is None  # an error event ends a stream legitimately


def test_json_body():
    body = json.dumps({"id": "r", "model": "m", "choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 3, "completion_tokens": 1}}).encode()
    facts = inspect_json_body(body)
    assert (facts.finish_reasons, facts.input_tokens, facts.output_tokens) == (["stop"], 3, 1)
    assert "not JSON" in inspect_json_body(b"<html>").malformed


@pytest.mark.parametrize("bad", [-1, 2.5, "7", True, None, [1]])
def test_nonsense_usage_is_ignored(bad):
    """An upstream's usage is caller data: a count the tracer would refuse must not reach it."""
    inspector = StreamInspector()
    inspector.feed(chunk("a") + chunk(choices=False, usage={"prompt_tokens": bad, "completion_tokens": 1,
                                                            "prompt_tokens_details": {"cached_tokens": bad}}))
    facts = inspector.facts
    assert (facts.input_tokens, facts.output_tokens, facts.cached_input_tokens) == (None, 1, None)


def test_deadlines_pick_the_nearest_limit():
    deadlines = Deadlines(Timeouts(ttft=2, idle=1, total=10), start=100.0)
    assert deadlines.next(False) == (102.0, "ttft")
    deadlines.token(109.5)
    assert deadlines.next(True) == (110.0, "total")  # idle would be 110.5
    deadlines.token(105.0)
    assert deadlines.next(True) == (106.0, "idle")


def test_disabled_timeouts():
    deadlines = Deadlines(Timeouts(ttft=0, idle=None, total=0), start=5.0)
    assert deadlines.next(False) == (None, "total")
    assert deadlines.next(True) == (None, "total")
    with pytest.raises(ValueError, match="idle timeout must be >= 0"):
        Timeouts(idle=-1)


class Timer:
    """What ``loop.call_at`` returns, as far as a Watchdog uses it."""

    def __init__(self, when: float, callback) -> None:
        self.when, self.callback, self.cancelled = when, callback, False

    def cancel(self) -> None:
        self.cancelled = True


class VirtualLoop:
    """The two loop methods a Watchdog uses, on a clock the test moves: its timers fire in order, exactly
    at their deadlines, however loaded the machine is."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[Timer] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback) -> Timer:
        timer = Timer(when, callback)
        self.timers.append(timer)
        return timer

    def run_until(self, until: float) -> None:
        while due := sorted((t for t in self.timers if not t.cancelled and t.when <= until), key=lambda t: t.when):
            timer = due[0]
            self.timers.remove(timer)
            self.now = timer.when
            timer.callback()
        self.now = until


class RequestTask:
    """Stands for the request's task: records when the Watchdog cancelled it."""

    def __init__(self, loop: VirtualLoop) -> None:
        self.loop = loop
        self.cancelled_at: float | None = None

    def cancel(self) -> None:
        self.cancelled_at = self.loop.now


def _watch(timeouts: Timeouts, token_times: list[float], limit: float = 3.0) -> tuple[str | None, float | None]:
    """Run a Watchdog over a request that receives tokens at the given offsets, on a virtual clock;
    (expired kind, when the request was cancelled)."""
    loop = VirtualLoop()
    task = RequestTask(loop)
    watchdog = Watchdog(Deadlines(timeouts, loop.time()), loop, task)
    for at in token_times:
        loop.run_until(at)
        if task.cancelled_at is not None:
            break  # a cancelled request receives nothing more
        watchdog.token()
    loop.run_until((token_times[-1] if token_times else 0.0) + limit)
    return watchdog.expired, task.cancelled_at


def test_watchdog_rearms_on_first_token():
    """ttft 10 s, idle 50 ms: after the first token the (earlier) idle deadline must apply at once."""
    expired, cancelled_at = _watch(Timeouts(ttft=10, idle=0.05, total=0), [0.0])
    assert expired == "idle" and cancelled_at == pytest.approx(0.05)


def test_watchdog_follows_tokens_then_fires():
    tokens = [0.02 * i for i in range(1, 11)]  # every 20 ms for 200 ms, idle limit 80 ms
    expired, cancelled_at = _watch(Timeouts(ttft=1, idle=0.08, total=0), tokens)
    assert expired == "idle"
    assert cancelled_at == pytest.approx(0.28)  # the last token + 80 ms: not before, and not later


def test_watchdog_ttft_and_total():
    assert _watch(Timeouts(ttft=0.05, idle=1, total=0), [])[0] == "ttft"
    tokens = [0.02 * i for i in range(1, 30)]
    expired, cancelled_at = _watch(Timeouts(ttft=1, idle=1, total=0.2), tokens)
    assert expired == "total" and cancelled_at == pytest.approx(0.2)
    expired, _ = _watch(Timeouts(ttft=0, idle=0, total=0), [], limit=0.05)
    assert expired is None  # all disabled: the request ends on its own
