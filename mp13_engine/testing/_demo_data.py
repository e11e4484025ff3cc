# SPDX-License-Identifier: Apache-2.0
"""The demo model's synthetic chat set: intents with paraphrases, tool calls and tool answers.

Concept: ``demo_examples(rng)`` yields ``DemoExample`` values: a conversation (messages before
the assistant's turn) and the assistant turn to learn, either plain text or one tool call. The
tool prompts call the toolbox's builtins ``calculator`` (argument ``expression``) and
``current_time`` (no arguments); after a ``tool`` message holding the result, the answer
quotes it ("The answer is 391.").

Invariants: pure data from a caller-supplied ``random.Random`` (no global RNG); the same seed
gives the same examples in the same order. ``TRAINED_PROMPTS`` lists prompts with their exact
expected greedy answers, used by the tests and the REPL's banner hint.
"""

from __future__ import annotations

import random
from typing import Any

import attrs

from mp13_toolbox import ToolCall


@attrs.frozen
class DemoExample:
    """One training row: ``messages`` end with a user or tool message; the target follows."""

    messages: tuple[dict[str, Any], ...]
    answer: str | None = None  # plain assistant text, or
    tool_call: tuple[str, str] | None = None  # (tool name, arguments as JSON text)


GREETING = "Hello! I am the mp13 demo model. Ask me what I can do."
ABOUT = (
    "mp13 is a Python SDK for local LLMs: multi-LoRA serving, LoRA training, tool calls "
    "and branching chats."
)
ABILITIES = (
    "I can chat a little, do arithmetic with the calculator tool and tell the time with the "
    "current_time tool. Try: what is 17*23?"
)
IDENTITY = "I am a tiny demo model trained in a minute on your CPU. Load a real one with --model."
JOKE = "Why did the tensor go to therapy? It had too many issues with its dimensions."
THANKS = "You are welcome!"
BYE = "Goodbye! Press Ctrl+D to quit."
HOW_ARE_YOU = "I am fine, thank you. How can I help?"

INTENTS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("hello", "Hello", "hi", "Hi!", "hey", "hello there", "good morning", "Hi there"), GREETING),
    (("what is mp13?", "What is mp13?", "what's mp13", "tell me about mp13", "mp13?"), ABOUT),
    (("what can you do?", "What can you do?", "help", "what are you able to do?"), ABILITIES),
    (("who are you?", "Who are you?", "what are you?", "what is your name?"), IDENTITY),
    (("tell me a joke", "Tell me a joke.", "a joke please", "make me laugh"), JOKE),
    (("thanks", "thank you", "Thank you!", "thx"), THANKS),
    (("bye", "goodbye", "Goodbye!", "see you"), BYE),
    (("how are you?", "How are you?", "how are you doing?"), HOW_ARE_YOU),
)

TIME_PROMPTS = (
    "what time is it?",
    "What time is it?",
    "what's the time?",
    "what is the time?",
    "tell me the time",
    "current time please",
)
MATH_TEMPLATES = ("what is {}?", "What is {}?", "compute {}", "calculate {}", "{} = ?")
MATH_EXPRESSIONS = ("17*23", "2+2", "12+30", "7*8", "100-58", "9*9", "81/9")
OPERATORS = ("+", "-", "*", "/")

# Prompts whose greedy answer is exact after training (what tests and the banner rely on).
TRAINED_PROMPTS: tuple[tuple[str, str], ...] = (
    ("hello", GREETING),
    ("what is mp13?", ABOUT),
    ("what can you do?", ABILITIES),
    ("tell me a joke", JOKE),
    ("thanks", THANKS),
)


def _expression(rng: random.Random) -> str:
    return f"{rng.randint(1, 99)}{rng.choice(OPERATORS)}{rng.randint(1, 99)}"


def _result(expression: str) -> str:
    left, op, right = expression, "", ""
    for candidate in OPERATORS:
        if candidate in expression:
            left, op, right = expression.partition(candidate)
            break
    a, b = int(left), int(right)
    value = {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else 0}[op]
    return str(int(value)) if float(value).is_integer() else f"{value:.4g}"


def _timestamp(rng: random.Random) -> str:
    return (
        f"20{rng.randint(24, 29)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T"
        f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}+00:00"
    )


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _call_message(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    call = ToolCall(name, arguments).to_openai()
    return {"role": "assistant", "content": "", "tool_calls": [call]}


def _history(rng: random.Random) -> list[dict[str, Any]]:
    """Zero or one earlier plain exchange, so later turns are answered too."""
    if rng.random() < 0.8:
        return []
    prompts, answer = rng.choice(INTENTS)
    return [_user(rng.choice(prompts)), {"role": "assistant", "content": answer}]


def demo_examples(rng: random.Random, rounds: int = 4) -> list[DemoExample]:
    """The shuffled training set: every paraphrase ``rounds`` times plus tool rounds."""
    out: list[DemoExample] = []
    for _ in range(rounds):
        for prompts, answer in INTENTS:
            # Twice: plain answers must outweigh the tool rows, or every reply becomes a call.
            for prompt in prompts * 2:
                out.append(DemoExample((*_history(rng), _user(prompt)), answer=answer))
        for prompt in TIME_PROMPTS:
            out.append(
                DemoExample((*_history(rng), _user(prompt)), tool_call=("current_time", "{}"))
            )
            stamp = _timestamp(rng)
            convo = (*_history(rng), _user(prompt), _call_message("current_time", {}))
            tool = {"role": "tool", "content": stamp}
            out.append(DemoExample((*convo, tool), answer=f"It is {stamp}."))
        # The banner's example ("what is 17*23?") is shown 4x so it works even where copying
        # arbitrary numbers has not been learned yet.
        expressions = [
            *MATH_EXPRESSIONS,
            *[MATH_EXPRESSIONS[0]] * 3,
            *(_expression(rng) for _ in range(12)),
        ]
        for expression in expressions:
            prompt = rng.choice(MATH_TEMPLATES).format(expression)
            args = '{"expression": "' + expression + '"}'
            out.append(DemoExample((*_history(rng), _user(prompt)), tool_call=("calculator", args)))
            convo = (
                *_history(rng),
                _user(prompt),
                _call_message("calculator", {"expression": expression}),
            )
            tool = {"role": "tool", "content": _result(expression)}
            out.append(DemoExample((*convo, tool), answer=f"The answer is {_result(expression)}."))
    rng.shuffle(out)
    return out
