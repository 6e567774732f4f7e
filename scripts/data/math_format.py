"""Prompt format and row parsing shared by the DAPO-Math and AIME preparation scripts.

The DAPO scorer (``verl.utils.reward_score.math_dapo``, picked by ``data_source`` ``math_dapo`` or
any ``aime*``) reads the last ``Answer: ...`` line of a response, so prompts use the DAPO-Math-17k
instruction verbatim.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prep_common import MalformedRow, first_present, require_text, user_prompt

#: Instruction wrapped around every problem: the prompt of DAPO-Math-17k (BytedTsinghua-SIA).
DAPO_PROMPT_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_PROMPT_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'

#: Columns that may hold the problem statement in the common hub copies.
PROBLEM_COLUMNS = ("problem", "Problem", "question", "Question", "prompt")
#: Columns that may hold the final answer in the common hub copies.
ANSWER_COLUMNS = ("answer", "Answer", "solution", "ground_truth")


def dapo_prompt(problem: str) -> list[dict[str, str]]:
    """Chat messages asking for ``problem`` in the DAPO format."""
    return user_prompt(DAPO_PROMPT_PREFIX + problem + DAPO_PROMPT_SUFFIX)


def parse_messages(value: Any) -> list[dict[str, str]]:
    """Validate a verl ``prompt`` column value (chat messages) and return it as plain dicts."""
    if hasattr(value, "tolist"):  # numpy arrays from parquet
        value = value.tolist()
    if not isinstance(value, (list, tuple)) or not value:
        raise MalformedRow("prompt must be a non-empty list of chat messages")
    messages = []
    for position, message in enumerate(value):
        if not isinstance(message, Mapping):
            raise MalformedRow(f"prompt message {position} is a {type(message).__name__}, not a dict")
        role, content = message.get("role"), message.get("content")
        if role not in ("system", "user", "assistant"):
            raise MalformedRow(f"prompt message {position} has role {role!r}; allowed: system, user, assistant")
        messages.append({"role": role, "content": require_text(content, f"prompt message {position} content")})
    if messages[-1]["role"] != "user":
        raise MalformedRow("the last prompt message must come from the user")
    return messages


def ground_truth_of(row: Mapping[str, Any]) -> str:
    """The answer of a row: ``reward_model.ground_truth`` when present, else an answer column."""
    reward_model = row.get("reward_model")
    if isinstance(reward_model, Mapping):
        if reward_model.get("ground_truth") is not None:
            return answer_text(reward_model["ground_truth"], "reward_model.ground_truth")
        if not any(key in row for key in ANSWER_COLUMNS):
            raise MalformedRow("reward_model.ground_truth is missing or null, and there is no answer column")
    key, value = first_present(row, ANSWER_COLUMNS, "answer")
    return answer_text(value, key)


def answer_text(value: Any, what: str) -> str:
    """An answer value as a non-empty string (integers allowed)."""
    if isinstance(value, bool):
        raise MalformedRow(f"{what} is a boolean")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return require_text(value, what)


def problem_messages(row: Mapping[str, Any]) -> tuple[list[dict[str, str]], bool]:
    """The prompt of a row and whether it was already a verl chat prompt (kept verbatim).

    A ``prompt`` column holding chat messages (the verl layout of ``BytedTsinghua-SIA/DAPO-Math-17k``)
    is kept as it is; a plain problem text (``problem``/``question`` columns, or ``prompt`` as a string
    as in ``open-r1/DAPO-Math-17k-Processed``) is wrapped in the DAPO instruction.
    """
    prompt = row.get("prompt")
    if prompt is not None and not isinstance(prompt, str):
        return parse_messages(prompt), True
    key, value = first_present(row, PROBLEM_COLUMNS, "problem")
    return dapo_prompt(require_text(value, key)), False
