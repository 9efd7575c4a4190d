"""Each rank runs a few blocks under `vaswani.train.main_process_first` / `every_process_at_once`, with a failure
planted on one rank in some of them, and writes what happened to OUT.rank<R>.json: per case, the error each rank
raised (its type and message) and the order the blocks ran in.

    accelerate launch --multi_gpu --num_processes 2 tests/scripts/stop_together.py OUT
"""

import json
import sys
import time
from pathlib import Path

from accelerate import Accelerator

from vaswani.errors import UsageError
from vaswani.train import every_process_at_once, main_process_first

CASES = {  # name: (context, the rank whose block fails, or None)
    "main first, nobody fails": (main_process_first, None),
    "main first, the main process fails": (main_process_first, 0),
    "main first, the other process fails": (main_process_first, 1),
    "at once, the other process fails": (every_process_at_once, 1),
    "at once, nobody fails": (every_process_at_once, None),
}


def main(out: str) -> None:
    accelerator = Accelerator(cpu=True)
    rank = accelerator.process_index
    report = {}
    for name, (context, failing) in CASES.items():
        entry = report[name] = {"error": None, "ran_at": None}
        try:
            with context(accelerator):
                entry["ran_at"] = time.monotonic()
                if rank == 0:
                    time.sleep(0.5)  # a slow main process: the other one must still wait for it (main first)
                if rank == failing:
                    raise UsageError(f"planted on rank {rank}")
            entry["left_at"] = time.monotonic()
        except Exception as error:  # noqa: BLE001  (the test reads what was raised)
            entry["error"] = [type(error).__name__, str(error)]
    Path(f"{out}.rank{rank}.json").write_text(json.dumps(report))
    accelerator.end_training()


if __name__ == "__main__":
    main(sys.argv[1])
