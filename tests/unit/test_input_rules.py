"""What the models refuse, as the CRDs do at `kubectl apply` (tests/cluster/test_crds.py): a Queue's timeout of 0s,
a Job naming its queue or handler with something that is no object name, a Schedule's cron with a field out of its
range. The cron grammar is the operator's too: whatever the model accepts, lifecycle/schedule.py can evaluate."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from sextant.lifecycle import schedule as S
from sextant.resources.common import problems
from sextant.resources.job import JobSpec
from sextant.resources.queue import QueueSpec
from sextant.resources.schedule import MACROS, ScheduleSpec

TEMPLATE = {"queue": "q", "handler": "h"}


def parser_problem(cron: str) -> str | None:
    """What lifecycle/schedule.py says of a cron (its Invalid condition), or None when it can fire."""
    try:
        S.check_cron(cron)
    except S.InvalidSchedule as exc:
        assert exc.reason == "InvalidCron"
        return exc.message
    return None


def refusal(model: Any, data: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(data)
    return problems(caught.value)


@pytest.mark.parametrize("timeout", ["0s", "0ms", "0h0m0s", "0.0s", "0.5ms", "0.0001ms"])
def test_a_queue_timeout_of_nothing_is_refused(timeout: str):
    message = refusal(QueueSpec, {"timeout": timeout})
    assert message.startswith("timeout: ") and "at least 1ms" in message, message


@pytest.mark.parametrize("timeout", ["1ms", "0.001s", "1s", "5m", "87600h"])
def test_a_positive_timeout_is_accepted(timeout: str):
    assert QueueSpec.model_validate({"timeout": timeout}).timeout == timeout


@pytest.mark.parametrize("field", ["queue", "handler"])
@pytest.mark.parametrize("name", ["my handler", "Emails", "-q", "q-", "q_1", "ü", "q/1", "x" * 64])
def test_a_job_names_its_queue_and_handler_as_objects_are_named(field: str, name: str):
    for model, data in ((JobSpec, {**TEMPLATE, field: name}),
                        (ScheduleSpec, {"interval": "1m", "jobTemplate": {**TEMPLATE, field: name}})):
        message = refusal(model, data)
        assert f"{field}: " in message, message


@pytest.mark.parametrize("name", ["q", "emails-2", "a.b", "0", "x" * 63])
def test_object_names_are_accepted(name: str):
    assert JobSpec.model_validate({"queue": name, "handler": name}).handler == name


BAD_CRONS = [
    ("61 * * * *", "minute field must be 0-59"),
    ("* 24 * * *", "hour field must be 0-23"),
    ("* * 0 * *", "day-of-month field must be 1-31"),
    ("* * 32 * *", "day-of-month field must be 1-31"),
    ("* * * 13 *", "month field must be 1-12 or jan-dec"),
    ("* * * 0 *", "month field must be 1-12"),
    ("* * * * 8", "day-of-week field must be 0-7 or sun-sat"),
    ("* * * * mon-foo", "day-of-week field"),
    ("* * * jan-mon *", "month field"),
    ("*/0 * * * *", "minute field"),
    ("1-60 * * * *", "minute field"),
    ("1,,2 * * * *", "minute field"),
    ("? * * * *", "minute field"),
    ("0 0 L/2 * *", "day-of-month field"),
    ("0 0 L-5 * *", "day-of-month field"),
    ("0 0 15W * *", "day-of-month field"),
    ("0 0 * * L", "day-of-week field"),
    ("0 0 * * 5#3", "day-of-week field"),
    ("H * * * *", "minute field"),
    ("0 0 * *", "4 fields"),
    ("0 0 * * * *", "6 fields"),
    ("@every 5m", "unknown macro"),
    ("@HOURLY", "unknown macro"),
    (" 0 * * * *", "remove the spaces before or after it"),
    (" @hourly", "remove the spaces"),
    ("0 * * * * ", "remove the spaces"),
    ("@hourly *", "unknown macro"),
    ("0 0 *", "it has 3 fields"),
    ("0 *\n* * *", "separate the five fields"),
]


@pytest.mark.parametrize("cron, words", BAD_CRONS)
def test_a_bad_cron_is_refused_naming_the_field_and_its_rule(cron: str, words: str):
    message = refusal(ScheduleSpec, {"cron": cron, "jobTemplate": TEMPLATE})
    assert message.startswith("cron: ") and words in message, message
    assert parser_problem(cron) is not None  # and the operator refuses it too


GOOD_CRONS = ["* * * * *", "0 2 * * *", "*/15 9-17 * * mon-fri", "0 0 1 JAN,jul ?", "0 0 ? * 7", "5/10 * * * *",
              "59/15 23/2 31/3 12/5 6/2", "00 09 * * *", "50-10 22-2 * nov-feb sat-mon", "0 0 * * SUN-sat/2",
              "0,15,30,45 * 1-7,15 */3 0-7", "0 0 L * *", "0 0 1,l * *", "0 0 15-L/5 * *", "0\t0  *\t*  *",
              "1-59/7 0-23/1 1-31/30 1-12/11 0-7/7", *MACROS]


@pytest.mark.parametrize("cron", GOOD_CRONS)
def test_every_form_the_operator_evaluates_is_accepted(cron: str):
    assert ScheduleSpec.model_validate({"cron": cron, "jobTemplate": TEMPLATE}).cron == cron
    assert parser_problem(cron) is None


def test_a_cron_that_matches_no_date_is_the_operators_to_report():
    assert ScheduleSpec.model_validate({"cron": "0 0 30 2 *", "jobTemplate": TEMPLATE})
    assert "matches no date" in parser_problem("0 0 30 2 *")


# Cron-like text: the pieces of the grammar, in and out of range, and what croniter alone would take.
_PIECE = st.one_of(st.integers(0, 62).map(str), st.sampled_from(
    ["*", "?", "L", "W", "15W", "5#2", "l5", "H", "R", "jan", "DEC", "feb", "sun", "Sat", "mon", "foo", "00", "07"]))
_ITEM = st.one_of(_PIECE, st.tuples(_PIECE, _PIECE).map("-".join),
                  st.tuples(st.one_of(_PIECE, st.tuples(_PIECE, _PIECE).map("-".join)),
                            st.integers(0, 70)).map(lambda t: f"{t[0]}/{t[1]}"))
# Most fields *, so that a wild field is mostly tried beside valid ones, and some of the crons are valid.
_FIELD = st.one_of(st.just("*"), st.just("*"), st.lists(_ITEM, min_size=1, max_size=3).map(",".join))
_SPACE = st.sampled_from([" "] * 20 + ["  ", "\t", "\n", "\u00a0"])  # mostly a space; a few that are no separator


@st.composite
def _crons(draw: st.DrawFn) -> str:
    if draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from(["", " "])) + draw(st.sampled_from([*MACROS, "@every", "@HOURLY"]))
    fields = draw(st.lists(_FIELD, min_size=draw(st.sampled_from([4, 5, 5, 5, 5, 5, 5, 6])), max_size=6))
    text = fields[0] + "".join(draw(_SPACE) + f for f in fields[1:])
    return text + draw(st.sampled_from([""] * 9 + [" "]))


@settings(max_examples=1500, deadline=None)
@given(_crons())
def test_the_model_accepts_a_cron_exactly_when_the_operator_can_evaluate_it(cron: str):
    try:
        ScheduleSpec.model_validate({"cron": cron, "jobTemplate": TEMPLATE})
        model_ok = True
    except ValidationError:
        model_ok = False
    problem = parser_problem(cron)
    if model_ok and problem is not None:
        assert "matches no date" in problem, (cron, problem)  # February 30: a date check, not the grammar's
    else:
        assert model_ok == (problem is None), (cron, problem)
