"""Continuous batching: many decoding rows, each its own exact decode loop, share every forward.

Each request runs the ordinary single-sequence loop (:class:`~constrained_spec.engine.loop.SpeculativeDecoder`)
on its own thread, over :class:`RowModel` views of the batched models: a row's ``extend``,
``prefill`` and cut-head calls become :class:`~constrained_spec.models.torch.batched.RowCall` jobs, and
the :class:`BatchCoordinator` runs them together once every active row is waiting on one. So each
row's algorithm, grammar, sampling options, RNG stream, proposers, draft length, budget and stop
are its own, and the output distribution of a row cannot depend on the others; only the forward is
shared. Rows join (a slot) and leave between rounds; a finished, failed or cancelled row frees its
slot at once.

A round runs one batched forward per model for the rows waiting on it, then a bounded share of the
prompts waiting to be prefilled (``prefill_chunk`` tokens while other rows decode, so a long prompt
joining stalls them for one chunk at a time; more when nobody decodes). Prompts go through the
:class:`~constrained_spec.engine.prefix_cache.PrefixCache` first: a prefix another request already
prefilled is copied into the slot instead of computed again.

A request may also hold several slots whose rows are not active all the time: the particles of an
SMC request (``engine.smc``) :meth:`~BatchCoordinator.reserve` their slots, :meth:`~BatchCoordinator.wake`
for one engine step each per round and :meth:`~BatchCoordinator.park` when done with it (a parked
row holds its slot and its cache rows, but no round waits for it), and fork by
:meth:`~BatchCoordinator.copy_row` (a slot's cache rows copied into another, between rounds).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from constrained_spec.engine import draft_length
from constrained_spec.engine.prefix_cache import PrefixCache
from constrained_spec.errors import ConfigError
from constrained_spec.models.protocol import HeadKind, RowBackend, RowCall, SequenceModel, make_rows
from constrained_spec.sampling import VerifyResult
from constrained_spec.sampling.verifier import VerifyCall, takes_filters, verifier_of

__all__ = ["BatchCoordinator", "BatchMetrics", "RowModel"]


#: the job kind of a row's verify (its block's acceptance math), batched with the other rows'
VERIFY = "verify"


@dataclass
class _Job:
    """A row waiting: on a model (a forward call, or a prompt to prefill in chunks), or on the
    verify math (``model == VERIFY``: ``verify`` is the row's one-row call of the verifier)."""

    model: str
    call: RowCall | None
    prefill: bool = False
    done_tokens: int = 0  # prefill: prompt tokens in the slot so far
    done: bool = False
    result: Any = None
    error: BaseException | None = None
    verify: VerifyCall | None = None


@dataclass
class BatchMetrics:
    """What the coordinator counted: rounds, rows per forward (a histogram), forward and prefill
    seconds, prefix-cache hits (tokens reused)."""

    rounds: int = 0
    rows_per_forward: dict[int, int] = field(default_factory=dict)
    rows_per_verify: dict[int, int] = field(default_factory=dict)
    forward_seconds: float = 0.0
    prefill_seconds: float = 0.0
    prefill_tokens: int = 0
    reused_tokens: int = 0

    def snapshot(self) -> dict[str, Any]:
        return {"rounds": self.rounds, "rows_per_forward": dict(self.rows_per_forward), "rows_per_verify": dict(self.rows_per_verify),
                "forward_seconds": self.forward_seconds, "prefill_seconds": self.prefill_seconds,
                "prefill_tokens": self.prefill_tokens, "reused_tokens": self.reused_tokens}


class BatchCoordinator:
    """Runs the forwards of up to ``slots`` decoding rows together.

    ``models``: the batched models by name (``"target"``, ``"draft"``), each with at least
    ``slots`` cache rows; a row holds the same slot in every model. ``prefill_chunk``: prompt tokens
    per round while other rows decode. ``prefix_cache_bytes``: memory for reusable prompt prefixes
    per model (0: no prefix cache); ``min_prefix``: the shortest prefix worth reusing.
    """

    def __init__(self, models: dict[str, RowBackend], slots: int | None = None, *, prefill_chunk: int = 128,
                 idle_prefill_chunk: int = 512, prefix_cache_bytes: int = 1 << 30, min_prefix: int = 16) -> None:
        if not models:
            raise ConfigError("a batch coordinator needs at least one model")
        self.models = dict(models)
        self.slots = min(m.slots for m in self.models.values()) if slots is None else slots
        if self.slots < 1 or any(m.slots < self.slots for m in self.models.values()):
            raise ConfigError(f"every batched model needs {self.slots} slots")
        self.max_length = min(m.max_length for m in self.models.values())
        self.prefill_chunk, self.idle_prefill_chunk = max(1, prefill_chunk), max(1, idle_prefill_chunk)
        self.prefixes = {name: PrefixCache(prefix_cache_bytes, min_prefix) for name in self.models} if prefix_cache_bytes > 0 else {}
        self.metrics = BatchMetrics()
        self._free = deque(range(self.slots))
        self._slot_free = threading.Condition()
        self._cond = threading.Condition()
        self._active = 0  # rows holding a slot
        self._pending: list[_Job] = []  # at most one per active row
        self._running = False
        self._verifier: Callable[..., VerifyResult] | None = None
        self._models_lock = threading.Lock()  # a round's forwards, or a copy of cache rows: one at a time
        self._gather = threading.Lock()  # one request at a time gathers several slots (no two hold part each)

    # -- rows ------------------------------------------------------------------------------
    @property
    def active_rows(self) -> int:
        return self._active

    def acquire(self, timeout: float | None = None) -> int:
        """A free slot for a new row (waits for one); the row counts as active until :meth:`release`."""
        with self._slot_free:
            if not self._slot_free.wait_for(lambda: bool(self._free), timeout):
                raise TimeoutError("no free batch slot")
            slot = self._free.popleft()
        with self._cond:
            self._active += 1
        return slot

    def release(self, slot: int) -> None:
        """The row on ``slot`` left: its slot is free, and the rows waiting on it no longer do."""
        with self._cond:
            self._active -= 1
            self._cond.notify_all()
        with self._slot_free:
            self._free.append(slot)
            self._slot_free.notify()

    def reserve(self, n: int, timeout: float | None = None) -> list[int]:
        """``n`` slots for one request's rows (an SMC request's particles), taken as they free up;
        the rows start parked (:meth:`wake` counts them active). Requests that gather slots do so
        one at a time, so two cannot each hold part of what they need. More than :attr:`slots`
        is a :class:`ConfigError`."""
        if not 1 <= n <= self.slots:
            raise ConfigError(f"{n} rows do not fit in a batch of {self.slots} slots")
        taken: list[int] = []
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            with self._gather, self._slot_free:
                while len(taken) < n:
                    left = None if deadline is None else deadline - time.monotonic()
                    if not self._slot_free.wait_for(lambda: bool(self._free), left):
                        raise TimeoutError("no free batch slot")
                    while self._free and len(taken) < n:
                        taken.append(self._free.popleft())
        except BaseException:
            self.unreserve(taken)
            raise
        return taken

    def unreserve(self, slots: list[int]) -> None:
        """Parked rows (from :meth:`reserve`) leave: their slots are free."""
        if not slots:
            return
        with self._slot_free:
            self._free.extend(slots)
            self._slot_free.notify_all()

    def wake(self, n: int) -> None:
        """``n`` parked rows become active: rounds wait for their jobs (each must :meth:`park` again)."""
        with self._cond:
            self._active += n

    def park(self) -> None:
        """An active row woken by :meth:`wake` stops counting (it keeps its slot and cache rows)."""
        with self._cond:
            self._active -= 1
            self._cond.notify_all()

    def copy_row(self, source: int, dest: int, lengths: dict[str, int]) -> None:
        """Fork a row: each model's cache rows of slot ``source`` up to ``lengths[model]`` positions
        into slot ``dest`` (whose rows before are dropped); never during a round's forwards."""
        with self._models_lock:
            for name, length in lengths.items():
                self.models[name].copy_rows(source, dest, length)

    def rows(self, model: str, slot: int, length: int = 0) -> RowModel:
        """The :class:`RowModel` view of ``model`` on ``slot`` (holding ``length`` positions: a fork's)."""
        row = RowModel(self, model, slot)
        row._length = length
        return row

    # -- jobs ------------------------------------------------------------------------------
    def submit(self, job: _Job) -> Any:
        """Wait until ``job`` has run (as part of a round, maybe run by this thread); its result."""
        with self._cond:
            self._pending.append(job)
            while not job.done:
                if not self._running and len(self._pending) >= self._active:
                    self._running = True
                    batch = list(self._pending)  # the round applies the prefill budget itself
                    self._cond.release()
                    try:
                        self._run_round(batch)
                    finally:
                        self._cond.acquire()
                        self._running = False
                        self._pending = [j for j in self._pending if not j.done]
                        self._cond.notify_all()
                else:
                    self._cond.wait()
        if job.error is not None:
            raise job.error
        return job.result

    def _prefill_budget(self, calls: list[_Job], jobs: list[_Job]) -> int:
        """Prompt tokens this round: ``idle_prefill_chunk`` while as many rows wait for their prompt
        as decode (filling the batch first: its rows then share their forwards; on a CPU a prompt
        costs the same in any chunks), else ``prefill_chunk`` (a long prompt stalls decoding rows
        one chunk at a time)."""
        prefilling = sum(1 for j in jobs if j.prefill)  # a row has one job at a time: jobs count rows
        return self.idle_prefill_chunk if prefilling >= len(calls) else self.prefill_chunk

    def _run_round(self, jobs: list[_Job]) -> None:
        with self._models_lock:
            self._run_round_locked(jobs)

    def _run_round_locked(self, jobs: list[_Job]) -> None:
        self.metrics.rounds += 1
        calls = [j for j in jobs if not j.prefill]
        budget = self._prefill_budget(calls, jobs)
        for name in self.models:
            # by slot, not by arrival: a row's place in the forward (and so its rounding) does not
            # depend on which thread came first (seeded SMC particles reproduce on real models too)
            mine = sorted((j for j in calls if j.model == name), key=lambda j: j.call.slot if j.call is not None else -1)
            if mine:
                self._forward(name, mine)
        verifies = [j for j in calls if j.model == VERIFY]
        if verifies:
            self._verify(verifies)
        for job in (j for j in jobs if j.prefill):
            if budget <= 0:
                break
            budget -= self._prefill_chunk(job, budget)

    def _forward(self, name: str, jobs: list[_Job]) -> None:
        t0 = time.perf_counter()
        try:
            results = self.models[name].forward([j.call for j in jobs if j.call is not None])
        except BaseException as exc:  # noqa: BLE001 - every waiting row gets the error
            for j in jobs:
                j.error, j.done = exc, True
            return
        finally:
            self.metrics.forward_seconds += time.perf_counter() - t0
        hist = self.metrics.rows_per_forward
        hist[len(jobs)] = hist.get(len(jobs), 0) + 1
        for j, r in zip(jobs, results):
            j.result, j.done = r, True

    def _verify(self, jobs: list[_Job]) -> None:
        """Every waiting row's verify as one call of the [B, k+1, V] function (rows padded to the
        longest block: see :func:`pad_verify_rows`; a lone row's call goes as it is)."""
        verifier = self._verifier
        try:
            assert verifier is not None
            calls = [j.verify for j in jobs if j.verify is not None]
            call, ks = (calls[0], None) if len(calls) == 1 else pad_verify_rows(calls)
            result = call.run(verifier)
        except BaseException as exc:  # noqa: BLE001 - every waiting row gets the error
            for j in jobs:
                j.error, j.done = exc, True
            return
        hist = self.metrics.rows_per_verify
        hist[len(jobs)] = hist.get(len(jobs), 0) + 1
        if ks is None:
            jobs[0].result, jobs[0].done = result, True
            return
        for b, (j, k) in enumerate(zip(jobs, ks)):
            j.result = VerifyResult(accepted=result.accepted[b : b + 1], next_token=result.next_token[b : b + 1],
                                    accept_prob=result.accept_prob[b : b + 1, :k])
            j.done = True

    def verifier(self, verifier: Callable[..., VerifyResult]) -> RowVerifier:
        """The verifier a row's loop calls: its verify waits for the other rows' and runs with them
        through ``verifier`` (one verifier per coordinator: the first one given)."""
        if self._verifier is None:
            self._verifier = verifier
        return RowVerifier(self)

    def _prefill_chunk(self, job: _Job, budget: int) -> int:
        """Advance a prefill by up to ``budget`` tokens (after the prefix cache's share); tokens computed."""
        model, call = self.models[job.model], job.call
        assert call is not None
        tokens, t0 = call.tokens, time.perf_counter()
        cache = self.prefixes.get(job.model)
        try:
            if job.done_tokens == 0 and call.start == 0 and cache is not None:
                reused = cache.restore(model, call.slot, tokens)
                job.done_tokens = reused
                self.metrics.reused_tokens += reused
            n = min(budget, len(tokens) - job.done_tokens)
            if n > 0:
                start = job.done_tokens
                model.forward([RowCall(call.slot, call.start + start, tokens[start : start + n], head="none")])
                job.done_tokens += n
                self.metrics.prefill_tokens += n
            if job.done_tokens >= len(tokens):
                if cache is not None and call.start == 0:
                    cache.store(model, call.slot, tokens)
                job.done = True
            return max(n, 0)
        except BaseException as exc:  # noqa: BLE001
            job.error, job.done = exc, True
            return 0
        finally:
            self.metrics.prefill_seconds += time.perf_counter() - t0

    # -- draft length by load --------------------------------------------------------------
    def draft_cap(self, k_max: int) -> int:
        """The draft length a row uses now: ``k_max`` alone, fewer as more rows share each verify
        (see :func:`~constrained_spec.engine.draft_length.batch_draft_length`)."""
        return draft_length.batch_draft_length(self._active, k_max)



def pad_verify_rows(calls: list[VerifyCall]) -> tuple[VerifyCall, list[int]]:
    """B rows' one-row verifier calls (each with its own k) as one call, and each row's k.

    Row b's block of k_b drafted tokens is padded to the longest, K: its padded drafted tokens get
    the uniform 1.0, which no acceptance probability exceeds, so the row stops at k_b at the
    latest; its q rows there are zero (not point masses), so the residual at position k_b is the
    row's own p_k_b and the draw there is exactly the bonus draw of the row alone, made with the
    row's last uniform, which goes to column K (the column the draw reads). Padded logits are zero
    and padded masks repeat the row's last mask; neither is read for a kept or drawn token.
    ``filters`` is said where any row says it (True where any row filters or leaves it unsaid).
    """
    ks = [c.k for c in calls]
    big_k = max(ks)
    first = calls[0]
    vocab = first.target_logits.shape[-1]
    device = first.target_logits.device
    rows = len(calls)
    logits = first.target_logits.new_zeros(rows, big_k + 1, vocab)
    q = torch.zeros(rows, big_k, vocab, dtype=torch.float32, device=device)
    tokens = torch.zeros(rows, big_k, dtype=torch.long, device=device)
    masks = first.bitmask.new_zeros(rows, big_k + 1, first.bitmask.shape[-1])
    uniforms = torch.ones(rows, big_k + 1, dtype=first.uniforms.dtype, device=device)
    flags = torch.zeros(rows, big_k, dtype=torch.bool, device=device)
    any_flags = False
    for b, (call, k) in enumerate(zip(calls, ks)):
        logits[b, : k + 1] = call.target_logits[0]
        if k:
            q[b, :k] = call.draft_probs[0, :k].float()
            tokens[b, :k] = call.draft_tokens[0]
            uniforms[b, :k] = call.uniforms[0, :k]
        uniforms[b, big_k] = call.uniforms[0, k]
        masks[b, : k + 1] = call.bitmask[0]
        masks[b, k + 1 :] = call.bitmask[0, k]
        if call.point_mass is not None and k:
            flags[b, :k] = call.point_mass[0]
            any_flags = True
    said = [c.filters for c in calls]
    filters = None if all(f is None for f in said) else any(f is None or f for f in said)
    padded = VerifyCall(logits, q, tokens, masks, torch.cat([c.temperature for c in calls]), torch.cat([c.top_k for c in calls]),
                        torch.cat([c.top_p for c in calls]), uniforms, flags if any_flags else None, filters)
    return padded, ks


class RowVerifier:
    """One row's verifier: hands its one-row call to the coordinator, which runs it with the
    other rows' (:meth:`BatchCoordinator._verify`)."""

    def __init__(self, coordinator: BatchCoordinator) -> None:
        self.coordinator = coordinator
        self._verify = verifier_of(self._submit, "row_verify")

    @property
    def takes_filters(self) -> bool:
        """Whether the batched verifier takes ``filters=`` (the loop then passes it)."""
        return takes_filters(self.coordinator._verifier)

    def __call__(self, *args: Any, **kwargs: Any) -> VerifyResult:
        """A verifier's call (:func:`~constrained_spec.sampling.verifier.verifier_of`) for this row."""
        return self._verify(*args, **kwargs)

    def _submit(self, call: VerifyCall) -> VerifyResult:
        return self.coordinator.submit(_Job(VERIFY, None, verify=call))


class RowModel:
    """One row of a batched model, as the decode loop sees a model (:class:`SequenceModel`, with the
    restricted-head capability where the batched model has it). Its length is its own: a crop is
    free; the tokens past it are overwritten by the next call."""

    def __init__(self, coordinator: BatchCoordinator, model: str, slot: int) -> None:
        self.coordinator, self.name, self.slot = coordinator, model, slot
        self.backend = coordinator.models[model]
        self.vocab_size = self.backend.vocab_size
        self.device = torch.device(self.backend.device)
        self._length = 0

    @property
    def length(self) -> int:
        return self._length

    def _call(self, tokens: list[int], head: HeadKind, allowed_ids: torch.Tensor | None = None, prefill: bool = False) -> torch.Tensor | None:
        if not tokens:
            raise ValueError("extend() needs at least one token")
        if self._length + len(tokens) > self.coordinator.max_length:
            raise ValueError(f"row {self.slot}: {self._length + len(tokens)} tokens exceed the batch slot's {self.coordinator.max_length}")
        job = _Job(self.name, RowCall(self.slot, self._length, list(tokens), head, allowed_ids), prefill=prefill)
        result = self.coordinator.submit(job)
        self._length += len(tokens)
        return result

    def extend(self, tokens: list[int]) -> torch.Tensor:
        out = self._call(tokens, "all")
        assert out is not None
        return out

    def prefill(self, tokens: list[int]) -> None:
        self._call(tokens, "none", prefill=True)

    def crop(self, length: int) -> None:
        if length > self._length or length < 0:
            raise ValueError(f"cannot crop a row of {self._length} tokens to {length}")
        self._length = length

    def reset(self) -> None:
        self._length = 0

    # the restricted-head capability (engine.proposers.DraftModelProposer uses it)
    @property
    def can_restrict_head(self) -> bool:
        return self.backend.can_restrict_head

    @property
    def head_prefix(self) -> int:
        return self.backend.head_prefix

    def set_head_prefix(self, n: int) -> bool:
        return False  # set once on the shared model, not per row

    def extend_last(self, tokens: list[int], allowed_ids: torch.Tensor) -> torch.Tensor:
        out = self._call(tokens, "restricted", allowed_ids)
        assert out is not None
        return out

    def extend_prefix_head(self, tokens: list[int]) -> torch.Tensor:
        out = self._call(tokens, "prefix")
        assert out is not None
        return out


def build_coordinator(target: SequenceModel, draft: SequenceModel | None, slots: int, max_length: int, *,
                      prefix_cache_bytes: int = 1 << 30, prefill_chunk: int = 128) -> BatchCoordinator:
    """A coordinator over the rows of ``target`` and ``draft`` (each model's own
    :meth:`~constrained_spec.models.protocol.BatchableModel.rows`; ``draft`` may be None): ``slots`` rows of up to
    ``max_length`` tokens each, their caches preallocated."""
    models: dict[str, RowBackend] = {}
    for name, model in (("target", target), ("draft", draft)):
        if model is not None:
            models[name] = make_rows(model, slots, max_length, role=name)
    return BatchCoordinator(models, slots, prefill_chunk=prefill_chunk, prefix_cache_bytes=prefix_cache_bytes)
