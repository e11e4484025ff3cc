# SPDX-License-Identifier: Apache-2.0
"""Build mp13's demo model and show what it answers.

    python scripts/build_demo_model.py            # build into the cache (as mp13chat does)
    python scripts/build_demo_model.py DEST       # build into DEST (rebuilds every time)
    python scripts/build_demo_model.py --ship     # build afresh and ship it in the package

Prints the build time and the greedy replies to the trained prompts, the tool-call prompt, and
a tool round, so a change to the recipe can be judged at a glance.
"""

from __future__ import annotations

import argparse
import pathlib
import tempfile
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from mp13_engine.testing import DemoRecipe, build_demo_model, demo_model_path
from mp13_engine.testing._demo import demo_tools, ship_demo_model
from mp13_engine.testing._demo_data import TRAINED_PROMPTS


def _reply(tok, model, messages: list[dict]) -> str:
    prompt = tok.apply_chat_template(
        messages, tools=demo_tools(), tokenize=False, add_generation_prompt=True
    )
    ids = tok(prompt, add_special_tokens=False, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=80, do_sample=False)
    return tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


def _progress(step: int, loss: float) -> None:
    if step % 25 == 0:
        print(f"step {step:4d}  loss {loss:.3f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", nargs="?", type=pathlib.Path, help="folder to build into")
    parser.add_argument("--steps", type=int, default=DemoRecipe().steps)
    parser.add_argument(
        "--ship", action="store_true", help="build afresh and copy into the package as shipped"
    )
    args = parser.parse_args()
    start = time.perf_counter()
    if args.ship:
        with tempfile.TemporaryDirectory() as tmp:
            built = build_demo_model(
                pathlib.Path(tmp), DemoRecipe(steps=args.steps), progress=_progress
            )
            path = ship_demo_model(built)
    elif args.dest is None:
        path = demo_model_path(use_shipped=False)
    else:
        path = build_demo_model(args.dest, DemoRecipe(steps=args.steps), progress=_progress)
    print(f"demo model at {path} ({time.perf_counter() - start:.1f} s)")
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    for prompt, expected in TRAINED_PROMPTS:
        reply = _reply(tok, model, [{"role": "user", "content": prompt}])
        print(f"{'ok ' if reply == expected else 'BAD'} {prompt!r} -> {reply!r}")
    for prompt in ("what is 17*23?", "what time is it?"):
        print(f"    {prompt!r} -> {_reply(tok, model, [{'role': 'user', 'content': prompt}])!r}")
    call = {
        "type": "function",
        "function": {"name": "calculator", "arguments": {"expression": "17*23"}},
    }
    tool_round = [
        {"role": "user", "content": "what is 17*23?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "391"},
    ]
    print(f"    after tool result 391 -> {_reply(tok, model, tool_round)!r}")


if __name__ == "__main__":
    main()
