# SPDX-License-Identifier: Apache-2.0
"""Training throughput: mp13 ``engine.train`` vs TRL ``SFTTrainer``, side by side in one run.

Same tiny/small model, same prompt/completion data (loss on the completion),
same LoRA config (all linear layers), batch size, steps, learning rate,
scheduler and seed, fp32 on CPU, no gradient checkpointing. Both process the
same tokens, so the tokens/s ratio is TRL's wall time over mp13's. TRL's time is
``trainer.train()`` (tokenization done before, in its constructor); mp13's is
shown twice: from ``engine.train`` returning (data rendered, adapter set up) to
the result, which matches TRL's span, and from the ``engine.train`` call.

    python benchmarks/bench_training.py [--size small] [--steps 30] [--model smollm2-135m]
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from _bench_engine_common import (
    add_repeats_option,
    build_models,
    new_parser,
    require,
    run_benchmark,
)

STEPS_DEFAULT = 30


def make_rows(n: int, seed: int = 0) -> list[dict]:
    rnd = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "river", "stone"]
    words += ["cloud", "maple", "ember", "quartz", "violet", "lantern"]
    rows = []
    for i in range(n):
        question = " ".join(rnd.choice(words) for _ in range(rnd.randint(20, 40)))
        answer = " ".join(rnd.choice(words) for _ in range(rnd.randint(20, 40)))
        rows.append({"prompt": f"Question {i}: {question}\nAnswer:", "completion": f" {answer}"})
    return rows


def run_mp13(model_path: Path, rows: list[dict], args, out: Path) -> dict:
    from mp13_engine import Engine, TrainingConfig

    with Engine.load(str(model_path), device="cpu", dtype="float32") as engine:
        cfg = TrainingConfig(
            adapter="bench",
            dataset=rows,
            max_steps=args.steps,
            batch_size=args.batch,
            learning_rate=args.lr,
            lora_r=8,
            lora_alpha=16,
            max_seq_len=512,
            seed=0,
            output_dir=str(out / "mp13"),
        )
        t0 = time.perf_counter()
        job = engine.train(cfg)  # returns once data is rendered and the adapter set up
        t1 = time.perf_counter()
        result = job.result()
        wall = time.perf_counter() - t0
        loop = time.perf_counter() - t1
        losses = [e.loss for e in job.events() if e.kind == "step"]
    return {"wall": wall, "loop": loop, "tokens": result.train_tokens, "losses": losses}


def checkpointing_argument(config_class: type) -> str:
    """The name that turns gradient checkpointing off in ``config_class`` (TRL's ``SFTConfig``).

    transformers 5.24 renamed ``gradient_checkpointing`` to ``activation_checkpointing``
    (the old name: FutureWarning, removed in v6); TRL defaults the old name to True, so
    where the new one exists it is the one to set (setting it also keeps the old quiet).
    """
    names = {f.name for f in dataclasses.fields(config_class)}
    return (
        "activation_checkpointing"
        if "activation_checkpointing" in names
        else "gradient_checkpointing"
    )


@contextlib.contextmanager
def quiet_dataset_preparation() -> Iterator[None]:
    """No ``datasets`` progress bars inside the block, as they were after it.

    SFTTrainer's constructor maps the dataset five times ("Adding EOS", "Tokenizing",
    "Building labels", "Truncating", "Dropping fully masked examples"), each with a bar
    that split the table; ``Dataset.map`` takes no option to hide its bar, so this uses
    datasets' own switch, put back as it was found.
    """
    from datasets.utils import (
        are_progress_bars_disabled,
        disable_progress_bars,
        enable_progress_bars,
    )

    if are_progress_bars_disabled():
        yield
        return
    disable_progress_bars()
    try:
        yield
    finally:
        enable_progress_bars()


def run_trl(model_path: Path, rows: list[dict], args, out: Path) -> dict:
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    tok = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype="float32")
    config = SFTConfig(
        output_dir=str(out / "trl"),
        max_steps=args.steps,
        per_device_train_batch_size=args.batch,
        learning_rate=args.lr,
        lr_scheduler_type="linear",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        optim="adamw_torch",
        seed=0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,  # the default resolves to bf16 autocast where supported; compare fp32
        fp16=False,
        max_length=512,
        completion_only_loss=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
        **{checkpointing_argument(SFTConfig): False},
    )
    with quiet_dataset_preparation():
        trainer = SFTTrainer(
            model=model,
            args=config,
            train_dataset=Dataset.from_list(rows),
            processing_class=tok,
            peft_config=LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"),
        )
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)  # keep the table readable
    trainer.remove_callback(ProgressCallback)
    tokens = 0

    def count(batch):
        nonlocal tokens
        tokens += int(batch["attention_mask"].sum())

    original = trainer.training_step

    def step(model, inputs, *a, **kw):
        count(inputs)
        return original(model, inputs, *a, **kw)

    trainer.training_step = step  # instance attribute on our own object, counting tokens
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return {"wall": wall, "tokens": tokens, "losses": losses}


def main(argv: Sequence[str] | None = None) -> None:
    parser = new_parser(__doc__)
    parser.add_argument(
        "--size",
        default="small",
        choices=["tiny", "small"],
        help="which tiny test model to train, beside any --model (default small)",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=STEPS_DEFAULT,
        help=f"optimizer steps per training run (default {STEPS_DEFAULT})",
    )
    parser.add_argument("--batch", type=int, default=4, help="rows per step (default 4)")
    parser.add_argument("--lr", type=float, default=1e-3, help="learning rate (default 1e-3)")
    add_repeats_option(parser, 2, "training runs of each side, mp13 and TRL alternating")
    run_benchmark(parser, measure_all, argv, quiet=True)


def measure_all(args) -> None:
    # Before any model is built or trained: without TRL the run could only fail halfway.
    for module in ("trl", "datasets"):
        require(module, "this benchmark compares mp13 with TRL's SFTTrainer and")
    rows = make_rows(64)
    with tempfile.TemporaryDirectory() as tmp:
        built = build_models(Path(tmp), extra=args.model, sizes=[args.size])
        for i, (label, model_path) in enumerate(built.items()):
            if i:
                print()
            compare(label, Path(model_path), rows, args, Path(tmp) / f"m{i}")


def compare(label: str, model_path: Path, rows: list[dict], args, tmpdir: Path) -> None:
    """Train mp13 and TRL alternately on one model and print the comparison."""
    mp13_runs, trl_runs = [], []
    for i in range(args.repeats):  # alternate so machine noise hits both alike
        mp13_runs.append(run_mp13(model_path, rows, args, tmpdir / f"r{i}"))
        trl_runs.append(run_trl(model_path, rows, args, tmpdir / f"r{i}"))
    m_wall = statistics.median(r["wall"] for r in mp13_runs)
    m_loop = statistics.median(r["loop"] for r in mp13_runs)
    t_wall = statistics.median(r["wall"] for r in trl_runs)
    m_tps = mp13_runs[0]["tokens"] / m_wall
    t_tps = trl_runs[0]["tokens"] / t_wall
    m_loss = statistics.fmean(mp13_runs[0]["losses"][-5:])
    t_loss = statistics.fmean(trl_runs[0]["losses"][-5:])
    print(
        f"model={label} steps={args.steps} batch={args.batch} lr={args.lr} (median of "
        f"{args.repeats})"
    )
    print(f"{'':24}{'mp13':>12}{'TRL SFT':>12}{'ratio':>10}")
    print(
        f"{'tokens per run':24}{mp13_runs[0]['tokens']:>12}{trl_runs[0]['tokens']:>12}"
        f"{mp13_runs[0]['tokens'] / max(trl_runs[0]['tokens'], 1):>10.3f}"
    )
    m_loop_tps = mp13_runs[0]["tokens"] / m_loop
    print(
        f"{'tokens/s, steps only':24}{m_loop_tps:>12.0f}{t_tps:>12.0f}{m_loop_tps / t_tps:>10.2f}"
        "  (goal >= 1.0; TRL: trainer.train(), mp13: after engine.train returns)"
    )
    print(
        f"{'tokens/s, incl. data prep':24}{m_tps:>12.0f}{'':>12}{m_tps / t_tps:>10.2f}"
        "  (mp13 also rendering + tokenizing the data)"
    )
    print(
        f"{'loss, mean of last 5':24}{m_loss:>12.4f}{t_loss:>12.4f}{m_loss / t_loss:>10.3f}"
        "  (goal within 5%)"
    )
    print(f"{'first loss':24}{mp13_runs[0]['losses'][0]:>12.4f}{trl_runs[0]['losses'][0]:>12.4f}")


if __name__ == "__main__":
    main()
