"""Properties of the lifecycle under random histories (hypothesis).

A small simulator plays the cluster and the controller around the pure core: time passes, the job is admitted
when it is queued and no pod of it is alive (admission writes nothing: the job stays queued until its pod
starts; "crash" admissions lose the decision's status, which must not matter), pods start (or never do, and
time out), succeed, fail with any exit code, are evicted or vanish, stopping pods
terminate, leases are renewed, users cancel and retry, the Queue or Handler disappears and comes back. After
every step the core reconciles, the simulator carries out its actions, and the lifecycle's rules are checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import event as _event
from hypothesis.errors import InvalidArgument
from hypothesis import strategies as st

from _builders import JOB, T0, handler, queue, snapshot, spec
from sextant.controller import writes
from sextant.lifecycle import states as S
from sextant.lifecycle import transitions as T
from sextant.lifecycle.attempts import RUNNER_NON_RETRYABLE, PodObservation
from sextant.resources.common import parse_time
from sextant.resources.handler import HandlerSpec
from sextant.resources.job import JobSpec, JobStatus, State
from sextant.resources.queue import QueueSpec

NON_RETRYABLE = (2, 3)
TIMELINE_REASONS = {"Error", "Timeout", "LeaseExpired", "PodLost", "NonRetryableExitCode", "Cancelled", "StartTimeout",
                    "Unschedulable"}
# Each state move of the core emits exactly one event; these are their reasons.
MOVE_EVENTS = {
    "Scheduled": State.SCHEDULED,
    "Queued": State.QUEUED,
    "Retried": State.QUEUED,
    "Started": State.RUNNING,
    "Succeeded": State.SUCCEEDED,
    "Failed": State.FAILED,
    "Dead": State.DEAD,
    "Cancelled": State.CANCELLED,
    "DuplicateIdempotencyKey": State.CANCELLED,
}
CONDITION_OF = {State.SUCCEEDED: "Succeeded", State.DEAD: "Dead", State.CANCELLED: "Cancelled", State.RUNNING: "Running"}


def event(text: str) -> None:
    """hypothesis.event for --hypothesis-show-statistics (what the histories reached); a no-op outside @given."""
    try:
        _event(text)
    except InvalidArgument:
        pass


def untouched(rule, job: T.JobSnapshot, *args):
    """rule(job, *args), checking that it leaves the job as it found it: the decision's status is a copy (a rule
    that changed the reading in place would change what the controller compares its decision with)."""
    status, job_spec = job.status.model_copy(deep=True), job.spec.model_copy(deep=True)
    decision = rule(job, *args)
    assert job.status == status and job.spec == job_spec and decision.status is not job.status
    return decision


# ---------------------------------------------------------------- the steps


@dataclass(frozen=True)
class Advance:
    seconds: int


@dataclass(frozen=True)
class Admit:
    crash: bool  # the pod is created, the status write is lost
    starts: bool = False  # and its container starts at once


@dataclass(frozen=True)
class PodStarts:
    pass


@dataclass(frozen=True)
class PodExits:
    code: int  # 0 succeeds


@dataclass(frozen=True)
class PodEvicted:
    reason: str


@dataclass(frozen=True)
class PodVanishes:
    pass


@dataclass(frozen=True)
class Terminate:
    pass  # stopping pods: a running one is killed (137), a finished one goes away


@dataclass(frozen=True)
class CollectGarbage:
    pass


@dataclass(frozen=True)
class Heartbeat:
    pass


@dataclass(frozen=True)
class Cancel:
    really: bool  # mostly False: a cancel early in a history would end most of them


@dataclass(frozen=True)
class Retry:
    token: str


@dataclass(frozen=True)
class ToggleQueue:
    really: bool  # mostly False, as for Cancel


@dataclass(frozen=True)
class ToggleHandler:
    really: bool


advance = st.builds(Advance, st.sampled_from([1, 5, 10, 15, 29, 31, 60, 120, 400]))
admit = st.builds(Admit, st.sampled_from([False, False, False, True]), st.booleans())
exits = st.builds(PodExits, st.sampled_from([0, 0, 1, 2, 3, 137, 255, RUNNER_NON_RETRYABLE]))
# Weighted by repetition: the common things happen often, a cancel or a missing Handler now and then.
steps = st.one_of(
    advance, advance, advance,
    admit, admit, admit, admit, admit,
    st.just(PodStarts()), st.just(PodStarts()),
    exits, exits, exits,
    st.builds(PodEvicted, st.sampled_from(["Evicted", "Preempted", "NodeShutdown"])),
    st.just(PodVanishes()),
    st.just(Terminate()), st.just(Terminate()),
    st.just(CollectGarbage()),
    st.just(Heartbeat()), st.just(Heartbeat()),
    st.builds(Cancel, st.sampled_from([True, False, False, False])),
    st.builds(Retry, st.sampled_from(["a", "b", "c"])), st.builds(Retry, st.sampled_from(["a", "b", "c"])),
    st.builds(ToggleQueue, st.sampled_from([True, False, False])),
    st.builds(ToggleHandler, st.sampled_from([True, False, False])),
)

queues = st.builds(
    lambda max_attempts, backoff, grace, jitter: queue(
        maxAttempts=max_attempts, timeout="60s", leaseDuration="30s", cancelGrace=grace,
        backoff={**backoff, "jitter": jitter},
    ),
    st.integers(1, 4),
    st.sampled_from([
        {"policy": "fixed", "initial": "0s"},
        {"policy": "fixed", "initial": "20s"},
        {"policy": "exponential", "initial": "5s", "factor": 2, "max": "30s"},
    ]),
    st.sampled_from(["0s", "10s"]),
    st.sampled_from([0.0, 0.5, 1.0]),
)


# ---------------------------------------------------------------- the world around the core


@dataclass
class World:
    queue_spec: QueueSpec
    job_spec: JobSpec
    now: datetime = T0
    status: JobStatus = field(default_factory=JobStatus)
    pods: dict[int, PodObservation] = field(default_factory=dict)
    queue_present: bool = True
    handler_present: bool = True
    lease_renewed_at: datetime | None = None
    generation: int = 1
    created: list[str] = field(default_factory=list)  # every CreatePod the cluster carried out
    recorded: set[str] = field(default_factory=set)  # every pod the timeline ever named: never created again
    ever_terminal: State | None = None
    handler_spec: HandlerSpec = field(default_factory=lambda: handler(NON_RETRYABLE))
    draining: bool = False

    # -- the inputs of the core

    def snap(self) -> T.JobSnapshot:
        return snapshot(self.status, self.job_spec, generation=self.generation)

    def observe(self) -> T.Observations:
        return T.Observations(
            self.queue_spec if self.queue_present else None,
            self.handler_spec if self.handler_present else None,
            tuple(self.pods[r] for r in sorted(self.pods)),
            self.lease_renewed_at,
        )

    @property
    def current(self) -> PodObservation | None:
        """The queued job's starting pod (sequence + 1), else the recorded attempt's."""
        return self.pods.get(self.status.sequence + 1) or self.pods.get(self.status.sequence)

    def alive(self) -> list[PodObservation]:
        return [p for p in self.pods.values() if p.alive]

    # -- the controller

    def admit(self, crash: bool) -> None:
        if not T.Decision(self.status).wants_admission or self.alive():
            return
        before = self.status
        decision = untouched(T.admit, self.snap(), self.observe(), self.now)
        self.check(before, decision, admitted=True)
        for action in decision.actions:
            assert isinstance(action, T.CreatePod)
            self.pods[action.sequence] = PodObservation(action.name, action.sequence, "Pending", created_at=self.now)
            self.created.append(action.name)
        self.lease_renewed_at = None
        event("admitted, then the operator crashed" if crash else "admitted" + ("" if self.draining else " in the history"))
        if not crash:
            self.status = decision.status

    def reconcile(self) -> T.Decision:
        before, observed = self.status, self.observe()
        decided = untouched(T.reconcile, self.snap(), observed, self.now)
        self.check_idempotent(decided, observed)
        decision = writes.scheduled(self.snap(), decided, observed, self.now)  # as the operator carries it out
        self.check(before, decision)
        for e in decision.events:
            event(f"event {e.reason}")
        if len(decision.events) > 1:
            event("several events in one decision")
        for a in decision.actions:
            event(f"action {type(a).__name__} grace={a.grace_seconds}")
        if decision.status.sequence != before.sequence:
            event("a pod took the job" if decision.status.attempts[-1].started_at else "a pod never started")
        self.status = decision.status
        self.recorded.update(a.pod for a in self.status.attempts if a.pod)
        for action in decision.actions:
            self.carry_out(action)
        self.check_world()
        return decision

    def carry_out(self, action: T.Action) -> None:
        assert isinstance(action, T.DeletePod), "only admit creates pods"
        sequence = next(r for r, p in self.pods.items() if p.name == action.name)
        target = self.pods[sequence]
        if action.grace_seconds == 0 or target.finished:
            del self.pods[sequence]
        else:
            self.pods[sequence] = replace(target, deleting=True)

    # -- the cluster and the users

    def play(self, step) -> None:
        current = self.current
        running = current is not None and not current.finished
        match step:
            case Advance(seconds):
                self.now += timedelta(seconds=seconds)
            case Admit(crash, starts):
                if self.status.state in (State.SCHEDULED, State.FAILED):  # a slot frees up once it is runnable
                    self.now = max(self.now, parse_time(self.status.next_attempt_at))
                    self.reconcile()
                self.admit(crash)
                new = self.pods.get(max(self.pods, default=0))
                if starts and new is not None and new.phase == "Pending":
                    self.pods[new.sequence] = replace(new, phase="Running", node="node-1", started_at=self.now)
                    self.lease_renewed_at = self.now
            case PodStarts() if running and current.phase == "Pending":
                self.pods[current.sequence] = replace(current, phase="Running", node="node-1", started_at=self.now)
                self.lease_renewed_at = self.now  # the runner takes the attempt's lease
            case PodExits(code) if running:
                phase = "Succeeded" if code == 0 else "Failed"
                self.pods[current.sequence] = replace(current, phase=phase, exit_code=code)
            case PodEvicted(reason) if running:
                self.pods[current.sequence] = replace(current, phase="Failed", reason=reason, message="taken away")
            case PodVanishes() if current is not None:
                del self.pods[current.sequence]
            case Terminate():
                for sequence, p in list(self.pods.items()):
                    if p.deleting and p.finished:
                        del self.pods[sequence]
                    elif p.deleting:
                        self.pods[sequence] = replace(p, phase="Failed", exit_code=137)
            case CollectGarbage():
                self.pods = {r: p for r, p in self.pods.items() if not (p.finished and not p.deleting)}
            case Heartbeat() if running and current.phase == "Running":
                self.lease_renewed_at = self.now
            case Cancel(really) if really:
                self.update_spec(cancel=True)
            case Retry(token):
                self.update_spec(retryToken=token)
            case ToggleQueue(really) if really:
                self.queue_present = not self.queue_present
            case ToggleHandler(really) if really:
                self.handler_present = not self.handler_present
        self.reconcile()

    def update_spec(self, **fields) -> None:
        self.job_spec = JobSpec.model_validate({**self.job_spec.model_dump(by_alias=True), **fields})
        self.generation += 1

    # -- the rules

    def check(self, before: JobStatus, decision: T.Decision, admitted: bool = False) -> None:
        after = decision.status
        max_attempts = after.max_attempts or self.queue_spec.max_attempts

        # Every move the core makes is one the state table allows, one event per move.
        path = [before.state] + [MOVE_EVENTS[e.reason] for e in decision.events if e.reason in MOVE_EVENTS]
        assert path[-1] == after.state, (path, after.state)
        for source, target in zip(path, path[1:]):
            assert S.allowed(source, target), f"{source} → {target} is not allowed"
        assert after.state is not None

        # Terminal states stay terminal; dead is left only by a retry.
        if before.state in S.TERMINAL:
            assert after.state == before.state
            assert after.attempts == before.attempts
            assert creates(decision) == []
        if before.state == State.SUCCEEDED:  # cancel (or anything) changes nothing of a succeeded job
            assert after.conditions == before.conditions
            assert after.finished_at == before.finished_at
        if before.state == State.DEAD and after.state != State.DEAD:
            assert "Retried" in [e.reason for e in decision.events]
            assert after.retry_token != before.retry_token

        # Retry resets the attempt counter, never the run sequence.
        if "Retried" in [e.reason for e in decision.events]:
            assert after.attempt == 0
            assert after.sequence >= before.sequence

        # Attempts never exceed maxAttempts; runs only grow.
        assert 0 <= after.attempt <= max_attempts
        assert after.sequence >= before.sequence

        # Only admit creates a pod, always the next run's deterministic name.
        made = creates(decision)
        if admitted:
            assert made == [T.CreatePod(T.pod_name(JOB, before.sequence + 1), before.sequence + 1, before.attempt + 1)]
            assert T.pod_name(JOB, before.sequence + 1) not in self.recorded, "a pod name is reused"
        else:
            assert made == []

        # A condition's lastTransitionTime moves only with its value.
        old = {c.type: c for c in before.conditions}
        for cond in after.conditions:
            if cond.type in old and old[cond.type].status == cond.status:
                assert cond.last_transition_time == old[cond.type].last_transition_time, cond.type

        # The controller is asked to look again whenever time alone can move the job.
        if decision.wake_at is not None:
            assert decision.wake_at >= self.now
        if after.state in (State.SCHEDULED, State.FAILED):
            assert decision.wake_at == parse_time(after.next_attempt_at) > self.now
        if after.state == State.RUNNING:
            assert decision.wake_at is not None

        self.check_status(after)

    def check_status(self, status: JobStatus) -> None:
        state, entries = status.state, status.attempts
        max_attempts = status.max_attempts or self.queue_spec.max_attempts

        # The timeline: one entry per run, in order, named after the run; finished except a running last one.
        assert [a.sequence for a in entries] == list(range(1, status.sequence + 1))
        assert all(a.pod == T.pod_name(JOB, a.sequence) for a in entries)
        for previous, entry in zip(entries, entries[1:]):
            assert entry.attempt in (1, previous.attempt + 1)
        for entry in entries[:-1]:
            assert entry.result != "running" and entry.finished_at is not None
        for entry in entries:
            assert entry.result in ("running", "succeeded", "failed", "cancelled")
            if entry.result == "failed":
                assert entry.reason in TIMELINE_REASONS and entry.reason != "Cancelled"
            if entry.result == "cancelled":
                assert entry.reason == "Cancelled"
            if entry.result == "succeeded":
                assert (entry.reason, entry.exit_code) == (None, 0)
            if entry.reason == "NonRetryableExitCode":
                assert entry.exit_code in (*NON_RETRYABLE, RUNNER_NON_RETRYABLE)

        # The timeline agrees with the state.
        last = entries[-1] if entries else None
        assert (last is not None and last.result == "running") == (state == State.RUNNING)
        if state in (State.RUNNING, State.SUCCEEDED, State.FAILED):
            assert status.attempt == last.attempt
        if state == State.SUCCEEDED:
            assert last.result == "succeeded"
        if state == State.FAILED:
            assert last.result == "failed" and status.attempt < max_attempts
            assert status.next_attempt_at is not None
        if state == State.DEAD:
            assert last.result == "failed"
            assert status.attempt >= max_attempts or last.reason == "NonRetryableExitCode"
        if state == State.CANCELLED and last is not None:
            assert last.result in ("cancelled", "failed")
        if state in (State.QUEUED, State.SCHEDULED):
            assert last is None or last.result == "failed"
        if state in S.FINISHED:
            assert status.finished_at is not None and status.next_attempt_at is None
        else:
            assert status.finished_at is None
        assert (status.stop_reason is None) or state == State.RUNNING

        # Conditions: True exactly while the job is in that state; Blocked while waiting without queue/handler.
        true = {c.type for c in status.conditions if c.status == "True"}
        for st_, cond in CONDITION_OF.items():
            assert (cond in true) == (state == st_), (cond, state)
        if state in (State.SCHEDULED, State.QUEUED, State.FAILED):
            assert ("Blocked" in true) == (not (self.queue_present and self.handler_present))
        else:
            assert "Blocked" not in true

    def check_idempotent(self, first: T.Decision, observed: T.Observations) -> None:
        again = T.reconcile(snapshot(first.status, self.job_spec, generation=self.generation), observed, self.now)
        assert again.status == first.status
        assert creates(again) == [] and again.events == []

    def check_world(self) -> None:
        # Every pod that took the job is in the timeline exactly once, in order; a name is created again only when
        # its pod went before it ever started (it never ran), and at most the newest, starting pod is unrecorded.
        distinct = list(dict.fromkeys(self.created))
        named = [a.pod for a in self.status.attempts]
        assert self.status.sequence == len(named) and named == distinct[:len(named)]
        assert len(distinct) - len(named) in (0, 1)
        if len(distinct) > len(named):  # still starting, or cancelled while it was (then it is on its way out)
            assert self.status.state in (State.QUEUED, State.CANCELLED)
            starting = self.pods.get(self.status.sequence + 1)
            # A started pod is recorded within RECORD_RUNNING_AFTER of its start (unless it goes first).
            assert starting is None or not starting.started or starting.deleting or (
                starting.started_at is not None and self.now - starting.started_at < writes.RECORD_RUNNING_AFTER)
        # Never two live attempts: no replacement while the previous pod is still terminating.
        assert len(self.alive()) <= 1
        if self.status.state in S.TERMINAL:
            self.ever_terminal = self.ever_terminal or self.status.state
        if self.ever_terminal is not None:
            assert self.status.state == self.ever_terminal

    # -- liveness

    def drain(self, exit_code: int = 1) -> None:
        """Queue and Handler present, every pod exits with exit_code: the job must reach a finished state."""
        self.queue_present = self.handler_present = True
        self.draining = True
        for _ in range(200):
            decision = self.reconcile()
            if self.status.state in S.FINISHED:
                return
            current = self.current
            if decision.wants_admission and not self.alive():
                self.admit(crash=False)
            elif current is not None and current.alive and not current.deleting and not current.finished:
                phase = "Succeeded" if exit_code == 0 else "Failed"
                self.pods[current.sequence] = replace(current, phase=phase, exit_code=exit_code)
            elif any(p.deleting for p in self.pods.values()):
                self.play(Terminate())
            else:
                assert decision.wake_at is not None, f"stuck in {self.status.state}"
                self.now = max(self.now, decision.wake_at)
        raise AssertionError(f"never finished: {self.status.state}")


def creates(decision: T.Decision) -> list[T.CreatePod]:
    return [a for a in decision.actions if isinstance(a, T.CreatePod)]


# ---------------------------------------------------------------- the properties


SETTINGS = settings(max_examples=int(__import__("os").environ.get("SEXTANT_EXAMPLES", 250)), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(
    q=queues,
    run_at=st.sampled_from([None, 0, 45]),
    history=st.lists(steps, min_size=10, max_size=60),
    last_exit=st.sampled_from([0, 1, 2]),
)
def test_random_histories_keep_every_rule(q, run_at, history, last_exit):
    job_spec = spec(runAt=(T0 + timedelta(seconds=run_at)).isoformat()) if run_at is not None else spec()
    world = World(q, job_spec)
    world.reconcile()
    for step in history:
        world.play(step)
    event(f"before drain: {world.status.state.value}")
    event(f"history length {len(history) // 10 * 10}+")
    world.drain(last_exit)
    final = world.status
    event(f"final: {final.state.value}")
    for entry in final.attempts:
        event(f"timeline reason {entry.reason}")
    if final.state == State.SUCCEEDED:
        assert final.attempts[-1].result == "succeeded"
    if final.state == State.DEAD:
        assert final.attempts[-1].result == "failed"
    if final.state == State.CANCELLED:
        assert world.job_spec.cancel


@settings(max_examples=100, deadline=None)
@given(q=queues, history=st.lists(steps, max_size=30))
def test_a_succeeded_job_ignores_cancel_and_retry(q, history):
    world = World(q, spec())
    world.reconcile()
    world.admit(crash=False)
    world.play(PodExits(0))
    assert world.status.state == State.SUCCEEDED
    frozen = world.status.model_copy(deep=True)
    for step in history:
        world.play(step)
    assert world.status.state == State.SUCCEEDED
    assert world.status.attempts == frozen.attempts
    assert world.status.conditions == frozen.conditions


@settings(max_examples=100, deadline=None)
@given(q=queues, exits=st.lists(st.sampled_from([1, 137, 255]), min_size=1, max_size=12))
def test_always_failing_ends_dead_after_exactly_max_attempts(q, exits):
    world = World(q, spec())
    world.reconcile()
    for code in exits * 10:
        if world.status.state == State.DEAD:
            break
        if world.status.state == State.FAILED:
            world.now = parse_time(world.status.next_attempt_at)
            world.reconcile()
        world.admit(crash=False)
        world.play(PodExits(code))
    assert world.status.state == State.DEAD
    assert world.status.attempt == len(world.status.attempts) == q.max_attempts


@settings(max_examples=100, deadline=None)
@given(q=queues, retries=st.integers(1, 4))
def test_retries_never_reuse_a_pod_name(q, retries):
    world = World(q, spec())
    world.reconcile()
    for n in range(retries + 1):
        world.drain()  # fails every attempt: dead
        assert world.status.state == State.DEAD
        world.play(Retry(f"token-{n}"))
        assert (world.status.state, world.status.attempt) == (State.QUEUED, 0)
    assert world.status.sequence == len(world.created) == len(set(world.created)) == (retries + 1) * q.max_attempts

