"""Does data augmentation help a fine-tune that has little data? Lab 08's task, measured.

Lab 03's model is fully fine-tuned on "dates" (ISO date -> written out) from a small share of
Lab 08's training split, five seeds per condition, every condition the same steps and batch:
  none              the small share alone (10%: 128 of 1,280 pairs)
  back-translation  plus synthetic pairs, `ratio` per real pair: a model fine-tuned on
                    "dates-back" (on the same share, reversed) writes an ISO source for extra
                    written-out dates (the answers of the training keys outside the share: never
                    a test or validation answer); a pair is kept when its source is a real date
                    whose day and year agree with the target ("date filter": a real date only)
  EDA noise         plus noisy copies of the share: each token of the ISO source dropped with
                    probability 0.1, then two tokens swapped; the target unchanged
  self-training     plus pairs the model writes itself: a model fine-tuned on the share (seed 0)
                    writes a target (greedy) for extra ISO sources (the keys of the training
                    pairs outside the share), kept when the target's numbers agree with the source
  all real          every training pair (the upper reference: back-translation with a perfect
                    reverse model)
Scores: exact match and chrF on Lab 08's test dates (greedy), mean ± 95% t interval over seeds,
and each augmentation's paired difference from "none" (the same seed's runs paired).

    python benchmarks/augmentation.py                 # the full table (threads: 1)
    python benchmarks/augmentation.py --steps 120 --test 100 --conditions \
        "none;back-translation;EDA noise"   # a cheaper design (measured: see below)

Measured (benchmarks/measured/augmentation.txt): at 160 steps back-translation with the
number-agreement filter stands clear of "none" on exact match (+7.8 ± 5.5 points), without it
(a real date is all it asks) it is 9.9 ± 4.6 points below, and EDA noise 17.8 ± 3.5 below. The
task needs 140-160 steps from Lab 03's model: at 80 a 10% share scores about 5% exact, at 120
back-translation's gain no longer clears the seeds' noise on exact match, and at 140 (with
`--generate 6`) it does: +9.4 ± 3.1 exact, +4.2 ± 0.9 chrF, in 126 s for none and
back-translation on 1 thread. Self-training with the same number filter (the share's own model
wrote 384 targets, 173 kept, 91% of them right) gains +10.3 ± 4.2 exact and +3.4 ± 1.9 chrF:
as much as back-translation (the two are not told apart over 5 seeds).
"""

import argparse
import random
import time

import torch

from llmlab.course.pretrained import trained_model
from llmlab.data.augment import (
    back_translate,
    eda_pairs,
    extra_targets,
    is_iso_date,
    mix,
    numbers_agree,
)
from llmlab.data.tasks import task_splits
from llmlab.evaluate import complete, seed_spread
from llmlab.evaluate.translation import chrf
from llmlab.recipes import lab03_config
from llmlab.tables import markdown_table
from llmlab.train.finetune import encode_example, finetune, finetune_copy, task_batches

MAX_NEW = 12  # tokens: a written-out date has at most 8, an ISO date 9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=160)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--share", type=float, default=0.1, help="of Lab 08's 1,280 train pairs")
    parser.add_argument("--test", type=int, default=200, help="test dates scored")
    parser.add_argument("--ratio", type=float, default=1.0, help="synthetic pairs per real pair")
    parser.add_argument("--back-steps", type=int, default=None, help="default: --steps")
    parser.add_argument("--conditions", help="separated by ';'",
                        default="none;back-translation;back-translation, date filter;"
                                "EDA noise;self-training;all real")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--generate", type=float, default=3.0,
                        help="targets back-translated, per synthetic pair the mix takes")
    parser.add_argument("--eda-drop", type=float, default=0.1)
    parser.add_argument("--eda-swaps", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    conditions = args.conditions.split(";")
    clock, cpu = {}, {}  # wall and this process's CPU seconds (the CPU is shared: wall alone
    # counts another program's time too; at one thread, CPU seconds are the run's own)

    start = time.perf_counter()
    base_model, tokenizer = trained_model("smoke", progress=False)
    base_model.eval()
    lr = lab03_config("smoke").lr / 2  # Lab 08's full fine-tuning rate
    sizes = {"train": 1280, "validation": 100, "test": 200}
    forward = task_splits("dates", sizes, seed=0)
    backward = task_splits("dates-back", sizes, seed=0)  # the same keys, reversed
    n_share = round(args.share * len(forward["train"]))
    share, share_back = forward["train"][:n_share], backward["train"][:n_share]
    test = forward["test"][: args.test]
    prompts, refs = [i.prompt for i in test], [i.answer for i in test]
    clock["load"] = time.perf_counter() - start

    def encode(pairs):
        return [encode_example(tokenizer.encode, p, f" {a}\n") for p, a in pairs]

    def as_pairs(items):
        return [(i.prompt, i.answer) for i in items]

    def tune(examples, seed, steps=args.steps):
        torch.manual_seed(seed)
        model = finetune_copy(base_model, "full")
        finetune(model, task_batches(examples, args.batch, seed=seed), steps, lr,
                 warmup_steps=5, progress=False)
        return model.eval()

    def score(model):
        outputs = complete(model, tokenizer, prompts, "greedy", max_new_tokens=MAX_NEW)
        exact = 100 * sum(o.strip() == r for o, r in zip(outputs, refs, strict=True)) / len(refs)
        return exact, chrf(outputs, refs).score

    # Back-translation, once: the reverse model and its synthetic pairs (shared by the seeds).
    # Two filters on the same generated sources: "back-translation" keeps a source that is a real
    # date whose day and year agree with the target's; "back-translation, date filter" only asks
    # for a real date.
    filters = {"back-translation": "numbers", "back-translation, date filter": "iso"}
    synthetic_bt = {}
    if any(c in filters for c in conditions):
        start, start_cpu = time.perf_counter(), time.process_time()
        back_model = tune(encode(as_pairs(share_back)), seed=0, steps=args.back_steps or args.steps)
        targets = extra_targets(forward["train"][n_share:],
                                avoid=[share, forward["validation"], forward["test"]])
        # Generate for more targets than the mix takes: the filter drops many (two in three).
        targets = targets[: round(args.generate * args.ratio * n_share)]
        generated = complete(back_model, tokenizer, [f"Written: {t} =" for t in targets],
                             "greedy", max_new_tokens=MAX_NEW)
        truth = {i.prompt[len("Written: "):-2]: i.answer for i in backward["train"]}
        for condition, kind in filters.items():
            def keep(source, target, kind=kind):
                return is_iso_date(source) and (kind == "iso" or numbers_agree(source, target))

            kept, dropped = back_translate(targets, lambda _: list(generated), keep)
            synthetic_bt[condition] = kept
            right = sum(truth[t] == s for s, t in kept)
            print(f"{condition}: {len(targets)} extra targets back-translated, {dropped} dropped "
                  f"by the filter, {len(kept)} kept, {right} of them with the right source "
                  f"({100 * right / max(1, len(kept)):.0f}%)")
        clock["back-translation setup"] = time.perf_counter() - start
        cpu["back-translation setup"] = time.process_time() - start_cpu

    # Self-training, once: the forward model trained on the share writes targets for extra
    # sources; the same number-agreement check keeps a pair (it cannot see a wrong month).
    synthetic_self = []
    if "self-training" in conditions:
        start, start_cpu = time.perf_counter(), time.process_time()
        teacher = tune(encode(as_pairs(share)), seed=0)
        extra = forward["train"][n_share : n_share + round(args.generate * args.ratio * n_share)]
        written = complete(teacher, tokenizer, [i.prompt for i in extra], "greedy",
                           max_new_tokens=MAX_NEW)
        kept = [(i, w.strip()) for i, w in zip(extra, written, strict=True)
                if numbers_agree(i.prompt[len("Date: "):-2], w.strip())]
        synthetic_self = [(i.prompt, w) for i, w in kept]
        right = sum(w == i.answer for i, w in kept)
        print(f"self-training: {len(extra)} extra sources written by the share's model, "
              f"{len(extra) - len(kept)} dropped by the filter, {len(kept)} kept, {right} of "
              f"them right ({100 * right / max(1, len(kept)):.0f}%)")
        clock["self-training setup"] = time.perf_counter() - start
        cpu["self-training setup"] = time.process_time() - start_cpu

    runs = {c: [] for c in conditions}
    for condition in conditions:
        start, start_cpu = time.perf_counter(), time.process_time()
        for seed in range(args.seeds):
            rng = random.Random(seed)
            real = as_pairs(share)
            if condition == "none":
                pairs = real
            elif condition == "all real":
                pairs = as_pairs(forward["train"])
            elif condition in filters:
                synthetic = [(f"Date: {s} =", t) for s, t in synthetic_bt[condition]]
                pairs = mix(real, synthetic, args.ratio, rng)
            elif condition == "self-training":
                pairs = mix(real, synthetic_self, args.ratio, rng)
            elif condition == "EDA noise":
                isos = [p[len("Date: "):-2] for p, _ in real]
                noisy = [(f"Date: {s} =", t) for s, t in
                         eda_pairs(isos, [a for _, a in real], copies=max(1, round(args.ratio)),
                                   rng=rng, drop=args.eda_drop,
                                   swaps=args.eda_swaps)]
                pairs = mix(real, noisy, args.ratio, rng)
            else:
                raise ValueError(f"unknown condition {condition!r}")
            runs[condition].append(score(tune(encode(pairs), seed)))
        clock[condition] = time.perf_counter() - start
        cpu[condition] = time.process_time() - start_cpu
        print(f"{condition}: {[f'{e:.1f}/{c:.1f}' for e, c in runs[condition]]} "
              f"({clock[condition]:.0f} s)", flush=True)

    rows = []
    for condition in conditions:
        exact = [e for e, _ in runs[condition]]
        chrfs = [c for _, c in runs[condition]]
        row = {"condition": condition,
               "exact % per seed": " ".join(f"{e:.1f}" for e in exact),
               "exact %": str(seed_spread(exact)) if len(exact) > 1 else f"{exact[0]:.1f}",
               "chrF": str(seed_spread(chrfs)) if len(chrfs) > 1 else f"{chrfs[0]:.1f}"}
        row["exact - none (paired)"] = row["chrF - none (paired)"] = ""
        if condition != "none" and "none" in runs and len(exact) > 1:
            diff = [e - n for e, (n, _) in zip(exact, runs["none"], strict=True)]
            cdiff = [c - n for c, (_, n) in zip(chrfs, runs["none"], strict=True)]
            row["exact - none (paired)"] = str(seed_spread(diff))
            row["chrF - none (paired)"] = str(seed_spread(cdiff))
        row["wall s (CPU s)"] = f"{clock[condition]:.0f} ({cpu[condition]:.0f})"
        rows.append(row)
    print(f"\nsmoke, {args.threads} thread(s): full fine-tuning, {args.steps} steps of "
          f"{args.batch}, "
          f"share {n_share} of 1,280 pairs, ratio {args.ratio} synthetic per real, "
          f"{len(refs)} test dates, {args.seeds} seeds: mean ± 95% t half-width")
    print(markdown_table(rows))
    cpu = {k: cpu.get(k, v) for k, v in clock.items()}  # loading: wall
    print("\nwall seconds (CPU seconds): "
          + ", ".join(f"{k} {v:.1f} ({cpu[k]:.1f})" for k, v in clock.items())
          + f"; in all {sum(clock.values()):.0f} ({sum(cpu.values()):.0f})")


if __name__ == "__main__":
    main()
