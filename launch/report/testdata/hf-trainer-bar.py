#!/usr/bin/env python3
"""Reproduces the progress bars a Hugging Face Trainer run writes to stderr.

transformers' ProgressCallback draws the training bar with
tqdm(total=state.max_steps, dynamic_ncols=True) on the main process and
advances it in on_step_end by the optimizer steps done
(update(state.global_step - current_step)); an evaluation opens a second
bar, tqdm(total=len(eval_dataloader), leave=training_bar is None,
dynamic_ncols=True), and closes it; on_log writes the logs dict with
training_bar.write, and only while a training bar is open.
Loading a sharded checkpoint ("Loading checkpoint shards") and datasets'
map ("Map", unit " examples") draw described bars before training.

The fixtures beside it were written by this script, with tqdm 4.64.1
(Debian's python3-tqdm) and its output going to a file, as under Slurm:

    python3 hf-trainer-bar.py slow > hf-trainer-slow.log 2>&1
    python3 hf-trainer-bar.py fast > hf-trainer-fast.log 2>&1
    python3 hf-trainer-bar.py warm > hf-trainer-warm.log 2>&1
    python3 hf-trainer-bar.py evalfirst > hf-trainer-evalfirst.log 2>&1

slow takes 1.3 s a step (tqdm shows s/it), fast 0.05 s (it/s); each
evaluates in the middle of training. warm takes 3 s for its first step
(a start-up) and 0.4 s for each of the 11 others, with no evaluation.
evalfirst evaluates 10 batches of 0.05 s before 8 steps of 0.5 s and 12
after them, logging only when training ends, as trainer.evaluate() around
trainer.train() does with logging_steps at its default of 500. The bars go
to stderr, the logs dicts to stdout.
"""

import sys
import time

from tqdm.auto import tqdm


def described_bars():
    for _ in tqdm(range(2), desc="Loading checkpoint shards"):
        time.sleep(0.3)
    bar = tqdm(total=3000, desc="Map", unit=" examples")
    for _ in range(3):
        time.sleep(0.2)
        bar.update(1000)
    bar.close()


def evaluate(training_bar, batches):
    """The evaluation bar, opened after the first batch: kept on screen
    (leave) when no training bar is open, before or after training."""
    prediction_bar = None
    for _ in range(batches):
        time.sleep(0.05)
        if prediction_bar is None:
            prediction_bar = tqdm(total=batches, leave=training_bar is None, dynamic_ncols=True)
        prediction_bar.update(1)
    prediction_bar.close()


def train(max_steps, step_s, eval_at, eval_batches, log_every, first_s=None):
    training_bar = tqdm(total=max_steps, dynamic_ncols=True)
    current_step = 0
    for global_step in range(1, max_steps + 1):
        time.sleep(first_s if global_step == 1 and first_s else step_s)
        training_bar.update(global_step - current_step)
        current_step = global_step
        if global_step % log_every == 0:
            training_bar.write(str({"loss": round(2.5 - 0.01 * global_step, 4), "learning_rate": 5e-05,
                                    "epoch": round(global_step / max_steps, 2)}))
        if global_step == eval_at:
            evaluate(training_bar, eval_batches)
            training_bar.write(str({"eval_loss": 2.1, "eval_runtime": 0.3, "epoch": round(global_step / max_steps, 2)}))
    training_bar.write(str({"train_runtime": round(max_steps * step_s, 2), "train_loss": 2.3, "epoch": 1.0}))
    training_bar.close()


if __name__ == "__main__":
    described_bars()
    if sys.argv[1:] == ["slow"]:
        train(max_steps=8, step_s=1.3, eval_at=4, eval_batches=6, log_every=2)
    elif sys.argv[1:] == ["evalfirst"]:
        # trainer.evaluate() before and after trainer.train(), at the
        # default log level: no "Total optimization steps" line, and no
        # logs dict but the one that ends training (logging_steps 500).
        evaluate(None, 10)
        train(max_steps=8, step_s=0.5, eval_at=0, eval_batches=0, log_every=500)
        evaluate(None, 12)
    elif sys.argv[1:] == ["warm"]:
        train(max_steps=12, step_s=0.4, eval_at=0, eval_batches=0, log_every=4, first_s=3.0)
    else:
        train(max_steps=40, step_s=0.05, eval_at=20, eval_batches=10, log_every=10)
