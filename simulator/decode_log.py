"""Token times of simulated requests, read back from their engine's decode steps.

An engine (:mod:`.engine`) advances every decoding request together: a shared stream position
``S`` grows by one per decode step, and a request that joined the batch at ``s_start`` has its
i-th token after the first when ``S`` reaches ``s_start + i``. The engine logs, for every tick,
where ``S`` stood at each change of pace (``SimEngine.step_log``): plain decode steps, then the
long steps that carried a prompt's prefill chunk (which prompt, how long a step). Those points
give each token's time as the simulation produced it: tokens come faster while the batch is
small, slower as it grows, and a prompt's prefill is a gap of one chunk step between tokens of
every request in the batch. A preempted request's tokens continue, after its pause, from its new
stream start (``resumes``). The samples also keep what the engine was doing (batch, prefill,
queue, KV, the prompt in prefill), so a stall in a trace can be set beside the simulated instance
and the neighbour that caused it.

Only the real-time demo feeds it (every tick, from the fleet's thread); virtual time does not pay for it.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from infersight.simulator.engine import SimEngine


@dataclass(frozen=True)
class EngineMoment:
    """One tick of one engine: what it did between ``t0`` and ``t1`` (simulated seconds)."""

    instance: str
    t0: float
    t1: float
    steps: float  # decode steps it made in the tick
    decoding: int  # requests in the decode batch at the tick's end
    prefilling: int
    waiting: int
    kv_usage: float
    prefill: tuple[int, int] | None = None  # (simulated request id, prompt tokens) whose prefill chunks ran then

    @property
    def step_s(self) -> float | None:
        """The time between two tokens of a request decoding through this tick (None: no step)."""
        return (self.t1 - self.t0) / self.steps if self.steps > 0 else None


@dataclass
class _Life:
    """One process lifetime of an engine (a restart starts ``S`` again at 0)."""

    started_at: float
    t: list[float]
    s: list[float]
    # per sample after the first: decoding, prefilling, waiting, KV usage, and None or the prefill whose
    # chunks the steps carried: (id, tokens, step seconds, when and at which position those steps began)
    state: list[tuple[int, int, int, float, tuple[int, int, float, float, float] | None]] = field(
        default_factory=list)


class DecodeLog:
    def __init__(self) -> None:
        self._lives: dict[str, list[_Life]] = {}
        self._last_t = 0.0

    @property
    def until(self) -> float:
        """The simulated second the log covers up to."""
        return self._last_t

    def record(self, engines: Iterable[SimEngine], t: float) -> None:
        """Sample every running engine at simulated second ``t`` (a tick end)."""
        previous = self._last_t
        for e in engines:
            if not e.up:
                continue
            lives = self._lives.setdefault(e.instance, [])
            life = lives[-1] if lives else None
            if e.step_log is None:
                e.step_log = []  # from now on the engine logs its steps within each tick
            points, e.step_log = e.step_log or [(t, e.S, None)], []
            if life is None or life.started_at != e.started_at or points[0][1] < life.s[-1]:
                # A new process: it started at the tick's start with an empty stream.
                life = _Life(e.started_at, [min(previous, t)], [0.0])
                lives.append(life)
            state = (len(e.decoding), len(e.prefilling), len(e.waiting), e.kv_usage())
            for at, position, prefill in points:
                if at > life.t[-1]:
                    life.t.append(at)
                    life.s.append(position)
                    life.state.append((*state, prefill))
        self._last_t = t

    def _life(self, instance: str, t0: float, t1: float) -> _Life | None:
        for life in reversed(self._lives.get(instance, ())):
            if life.t[0] <= t0 and t1 <= life.t[-1] + 1e-9:
                return life
        return None

    def token_times(self, instance: str, first_token: float, s_start: float, count: int,
                    end: float, resumes: Sequence[tuple[int, float]] = ()) -> list[float] | None:
        """Times (simulated seconds, engine side) of a request's ``count`` tokens; None when the log
        does not cover them (the request ran before the log started, or on a life it no longer has).

        ``resumes``: (token index, stream start from that token on), as ``SimRequest.resumes`` keeps
        them for a request that was preempted: its tokens before the pause, then those after it."""
        life = self._life(instance, first_token, end)
        if life is None or count < 1:
            return None
        ts, ss, state = life.t, life.s, life.state
        out = [first_token]
        j = bisect.bisect_right(ss, s_start)
        n = len(ss)
        switches = sorted((index, start) for index, start in resumes if start == start)  # NaN: never resumed
        for i in range(1, count):
            while switches and i >= switches[0][0]:
                s_start = switches.pop(0)[1]
                j = max(1, bisect.bisect_left(ss, s_start + i))
            p = s_start + i
            while j < n and ss[j] < p:
                j += 1
            if j == n:
                return None
            s0, s1, t0 = ss[j - 1], ss[j], ts[j - 1]
            if s1 <= s0:
                at = ts[j]
            elif state[j - 1][4] is not None:
                # long steps that carried a prefill chunk: every decoding request gets its token when
                # a step ends, so the stream climbs in stairs from where those steps began. The step in
                # progress may end in a later tick (a tick's end is no token time): not past the last
                # tick those steps ran in.
                rid, _tokens, per, t_from, s_from = state[j - 1][4]
                last = j
                while last < n - 1 and state[last][4] is not None and state[last][4][0] == rid:
                    last += 1
                at = min(ts[last], max(t0, t_from + math.ceil(p - s_from - 1e-9) * per))
            else:
                at = t0 + (p - s0) * (ts[j] - t0) / (s1 - s0)
            out.append(at if at > first_token else first_token)  # a request that joined mid-tick
        return out

    def moment(self, instance: str, t: float) -> EngineMoment | None:
        """What ``instance`` did in the tick holding simulated second ``t``."""
        for life in reversed(self._lives.get(instance, ())):
            if life.t[0] <= t <= life.t[-1]:
                j = max(1, bisect.bisect_left(life.t, t))
                decoding, prefilling, waiting, kv, prefill = life.state[j - 1]
                return EngineMoment(instance, life.t[j - 1], life.t[j], life.s[j] - life.s[j - 1], decoding,
                                    prefilling, waiting, kv, prefill[:2] if prefill else None)
        return None
