"""Each rank walks the held-out batches of `vaswani.training.evaluation.held_out_batches` (5 one-pair batches: rank 0
gets 3, rank 1 gets 2) under a few stop rules and writes what happened to OUT.rank<R>.json: per case, the batches it
was given and whether `EvaluationStopped` was raised. A rank still waiting in a collective operation that the other
left would hang the launch, which the test's timeout turns into a failure.

    accelerate launch --multi_gpu --num_processes 2 tests/scripts/held_out_batches.py OUT
"""

import json
import sys

from accelerate import Accelerator

from vaswani.data.batching import TokenBatchSampler
from vaswani.training.evaluation import EvaluationStopped, held_out_batches

CASES = {  # name: (the rank whose `stop` says yes, from its how-manieth question on), or None: no `stop`
    "no stop function": None,
    "nobody stops": (None, 0),
    "the main process stops at its second question": (0, 1),
    "the main process stops after the other's last batch": (0, 2),
    "only the other process stops": (1, 0),
}


def main(out: str) -> None:
    accelerator = Accelerator(cpu=True)
    rank = accelerator.process_index
    sampler = TokenBatchSampler(
        [4] * 5, [4] * 5, 4, shuffle=False, num_replicas=2, rank=rank, even_batches=False, oversized_alone=True
    )
    report = {"own batches": [list(b) for b in sampler.batches(0)]}
    for name, rule in CASES.items():
        questions = []

        def stop(rule=rule, questions=questions) -> bool:
            questions.append(len(questions))
            return rule[0] == rank and len(questions) - 1 >= rule[1]

        entry = report[name] = {"batches": [], "stopped": False}
        try:
            for batch in held_out_batches(sampler, accelerator, None if rule is None else stop):
                entry["batches"].append(list(batch))
        except EvaluationStopped:
            entry["stopped"] = True
        entry["questions"] = len(questions)
    with open(f"{out}.rank{rank}.json", "w") as file:
        json.dump(report, file)
    accelerator.end_training()  # the process group ends before the interpreter (else gloo can abort at exit)


if __name__ == "__main__":
    main(sys.argv[1])
