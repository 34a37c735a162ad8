"""Reply parsing and validation: reasoning blocks, the last JSON object, cuts at max_tokens,
and every validation rule with the message a re-ask carries."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.factories import canonical_scenario, make_card, make_scenario, make_workflow

from hetsched.deciders import check_mapping
from hetsched.llm.parse import close_truncated, last_json_object, parse_reply, split_reasoning
from hetsched.llm.validate import ReplyError, choice_from_object
from hetsched.model import Mapping, Mode
from hetsched.model.files import load_scenario

VRAM = load_scenario("vram_3way")
CHAIN = load_scenario("chain")
GOOD = {"A": "gpu_now", "B": "gpu_now", "C": "cpu", "D": "gpu_queue"}


def reply(mapping: dict[str, str], rationale: str = "short") -> str:
    return json.dumps({"mapping": mapping, "rationale": rationale})


# ---------------------------------------------------------------- reasoning split
def test_think_block_is_reasoning_and_answer_follows() -> None:
    reasoning, answer, cut = split_reasoning("<think>weigh A vs B</think>\n{\"x\": 1}")
    assert (reasoning, answer.strip(), cut) == ("weigh A vs B", '{"x": 1}', False)


def test_missing_opening_tag_still_splits_at_the_last_close() -> None:
    # templates that open <think> themselves leave only the closing tag in the reply
    reasoning, answer, cut = split_reasoning('draft {"mapping": {}} </think> final')
    assert reasoning == 'draft {"mapping": {}}' and answer == " final" and not cut


def test_unclosed_think_is_flagged() -> None:
    reasoning, answer, cut = split_reasoning("<think>still thinking about")
    assert cut and reasoning == "still thinking about" and answer == ""


def test_draft_json_inside_reasoning_is_ignored() -> None:
    text = "<think>maybe " + reply({k: "cpu" for k in GOOD}) + "</think>" + reply(GOOD)
    parsed = parse_reply(text)
    mapping, _ = choice_from_object(VRAM, parsed.obj)
    assert mapping.to_dict() == GOOD
    assert "maybe" in parsed.reasoning


def test_reply_cut_inside_think_says_so() -> None:
    with pytest.raises(ReplyError, match=r"inside its <think>.*max_tokens"):
        parse_reply("<think>A is big so", finish_reason="length")


# ---------------------------------------------------------------- last JSON object
def test_last_object_wins_and_braces_in_strings_do_not_confuse() -> None:
    text = 'first {"a": 1} then ```json\n{"b": "}{", "c": {"d": 2}}\n``` done'
    assert last_json_object(text) == {"b": "}{", "c": {"d": 2}}


def test_stray_prose_brace_does_not_hide_the_answer() -> None:
    text = "Put a { in the note. " + reply(GOOD)
    assert choice_from_object(VRAM, parse_reply(text).obj)[0].to_dict() == GOOD


def test_inner_object_of_a_cut_reply_is_not_taken_as_the_answer() -> None:
    text = '{"mapping": {"A": "cpu", "B": "cpu", "C": "cpu", "D": "cpu"}, "alt": {"A": "gpu_now"'
    assert last_json_object(text, cut=True) is None
    obj = parse_reply(text, finish_reason="length").obj
    assert obj["mapping"]["A"] == "cpu"


def test_no_object_is_an_error_naming_the_fix() -> None:
    with pytest.raises(ReplyError, match="no JSON object"):
        parse_reply("I would put A on the GPU.")
    with pytest.raises(ReplyError, match="empty"):
        parse_reply("   ")


def test_cut_in_rationale_keeps_the_complete_mapping() -> None:
    text = reply(GOOD, "because the queue frees memory for the")[:-12]
    parsed = parse_reply(text, finish_reason="length")
    assert parsed.repaired
    mapping, rationale = choice_from_object(VRAM, parsed.obj)
    assert mapping.to_dict() == GOOD and rationale == ""


def test_cut_inside_a_placement_never_completes_it_to_another_value() -> None:
    # "gpu_queue" cut to "gpu" would read as gpu_now: the half string must be dropped instead
    text = '{"mapping": {"A": "gpu_now", "B": "gpu_now", "C": "cpu", "D": "gpu'
    with pytest.raises(ReplyError, match=r'misses node\(s\) \["D"\]'):
        choice_from_object(VRAM, parse_reply(text, finish_reason="length").obj)


def test_cut_without_finish_reason_length_is_not_repaired() -> None:
    with pytest.raises(ReplyError, match="no JSON object"):
        parse_reply('{"mapping": {"A": "cpu"')


@settings(max_examples=100, deadline=None)
@given(
    codes=st.lists(st.sampled_from(["cpu", "gpu_now", "gpu_queue"]), min_size=4, max_size=4),
    rationale=st.text(max_size=40),
    cut=st.integers(min_value=1, max_value=400),
)
def test_any_cut_either_fails_validation_or_gives_back_the_exact_mapping(
    codes: list[str], rationale: str, cut: int
) -> None:
    mapping = dict(zip("ABCD", codes, strict=True))
    full = reply(mapping, rationale)
    closed = full.index("}") + 1  # the mapping object ends here (no brace in node ids or placements)
    text = full[: min(cut, len(full))]
    if closed <= len(text):
        # cut after the mapping closed: the mapping comes back whole
        assert parse_reply(text, finish_reason="length").obj["mapping"] == mapping, text
    try:
        got, _ = choice_from_object(VRAM, parse_reply(text, finish_reason="length").obj)
    except ReplyError:
        return  # unparseable, a node missing, or the mapping itself breaks the VRAM budget
    assert got.to_dict() == mapping


@pytest.mark.parametrize("rationale", ["short", "a \"quoted\" {brace} and a \\ slash, then more words"])
def test_every_cut_after_the_mapping_closed_recovers_it(rationale: str) -> None:
    full = reply(GOOD, rationale)
    closed = full.index("}") + 1
    for end in range(closed, len(full) + 1):
        parsed = parse_reply(full[:end], finish_reason="length")
        got, _ = choice_from_object(VRAM, parsed.obj)
        assert got.to_dict() == GOOD, full[:end]
    # one character fewer and the mapping object is still open: its last pair is complete, so it
    # closes to the same mapping; cut inside the last placement, and a node is missing
    assert choice_from_object(VRAM, parse_reply(full[: closed - 1], finish_reason="length").obj)[0].to_dict() == GOOD
    with pytest.raises(ReplyError, match=r'misses node\(s\) \["D"\]'):
        choice_from_object(VRAM, parse_reply(full[: closed - 3], finish_reason="length").obj)


@settings(max_examples=100, deadline=None)
@given(
    codes=st.lists(st.sampled_from(["cpu", "gpu_now"]), min_size=4, max_size=4),
    prefix=st.text(alphabet=st.characters(blacklist_characters="{}<>"), max_size=30),
    suffix=st.text(alphabet=st.characters(blacklist_characters="{}<>"), max_size=30),
    think=st.booleans(),
)
def test_prose_and_reasoning_around_the_answer_do_not_change_it(
    codes: list[str], prefix: str, suffix: str, think: bool
) -> None:
    mapping = dict(zip("ABCD", codes, strict=True))
    body = prefix + reply(mapping) + suffix
    text = f"<think>{prefix}</think>{body}" if think else body
    got, _ = choice_from_object(CHAIN, parse_reply(text).obj)
    assert got.to_dict() == mapping


def test_close_truncated_needs_an_object_start() -> None:
    assert close_truncated("no object here") is None


# ---------------------------------------------------------------- validation
def test_valid_reply_and_bare_mapping_and_alias() -> None:
    m, why = choice_from_object(VRAM, {"mapping": GOOD, "rationale": "pack A+B"})
    assert m == Mapping(GOOD) and why == "pack A+B"
    m2, _ = choice_from_object(CHAIN, {"A": "gpu", "B": "cpu", "C": "gpu_now", "D": "GPU_NOW"})
    assert m2.to_dict() == {"A": "gpu_now", "B": "cpu", "C": "gpu_now", "D": "gpu_now"}


@pytest.mark.parametrize(
    ("obj", "pattern"),
    [
        ([1, 2], "is a list"),
        ({"answer": "A on gpu"}, 'no "mapping" key'),
        ({"mapping": "A=cpu"}, "must be an object"),
        ({"mapping": {"A": "cpu", "B": "cpu", "C": "cpu"}}, r'misses node\(s\) \["D"\]'),
        ({"mapping": {**GOOD, "E": "cpu"}}, r'unknown node\(s\) \["E"\]'),
        ({"mapping": {**GOOD, "A": "tpu"}}, r'node "A": unknown placement "tpu"; accepted: cpu, gpu_now, gpu_queue'),
        ({"mapping": {**GOOD, "A": 3}}, "must be a string"),
        ({"mapping": dict.fromkeys(GOOD, "gpu_now")}, r"OOM: gpu_now tools need 6350 MB of 3000 MB"),
    ],
)
def test_invalid_replies_name_the_problem(obj: object, pattern: str) -> None:
    with pytest.raises(ReplyError, match=pattern):
        choice_from_object(VRAM, obj)


def test_duplicate_node_is_rejected() -> None:
    text = '{"mapping": {"A": "cpu", "A": "gpu_now", "B": "cpu", "C": "cpu", "D": "cpu"}}'
    with pytest.raises(ReplyError, match=r'\["A"\] appear more than once'):
        choice_from_object(CHAIN, parse_reply(text).obj)


def test_gpu_queue_rejected_in_binary_scenario() -> None:
    with pytest.raises(ReplyError, match=r'node "D" cannot be gpu_queue: this scenario is binary'):
        choice_from_object(CHAIN, {"mapping": {"A": "cpu", "B": "cpu", "C": "cpu", "D": "gpu_queue"}})


def test_gpu_placement_rejected_for_cpu_only_tool() -> None:
    sc = make_scenario(
        make_workflow([("W", "web"), ("L", "llm")], [("W", "L")]),
        [make_card("web", 300.0, None), make_card("llm", 900.0, 90.0)],
    )
    with pytest.raises(ReplyError, match=r'node "W" cannot be gpu_now: tool "web" has no GPU implementation'):
        choice_from_object(sc, {"mapping": {"W": "gpu_now", "L": "gpu_now"}})


def test_never_admissible_queue_is_rejected() -> None:
    sc = make_scenario(
        make_workflow([("A", "big")]), [make_card("big", 900.0, 90.0, vram_mb=5000.0)],
        mode=Mode.THREE_WAY, vram_budget_mb=4000.0,
    )
    with pytest.raises(ReplyError, match="never admissible"):
        choice_from_object(sc, {"mapping": {"A": "gpu_queue"}})


@pytest.mark.parametrize("kind", ["chain", "fork", "diamond"])
@pytest.mark.parametrize("mode", [Mode.BINARY, Mode.THREE_WAY])
def test_validator_agrees_with_the_scenario_checks_on_every_mapping(kind: str, mode: Mode) -> None:
    sc = canonical_scenario(kind, mode=mode)
    for m in sc.all_mappings():
        problem = check_mapping(sc, m)
        try:
            got, _ = choice_from_object(sc, {"mapping": m.to_dict()})
        except ReplyError:
            assert problem
        else:
            assert not problem and got == m
