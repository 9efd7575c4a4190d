"""Each rank runs a few blocks under `vaswani.training.distributed.main_process_first` and `together`, and one checkpoint save,
with a failure planted on one rank in some of them, and writes what happened to OUT.rank<R>.json: per case, the
error each rank raised (its type and message) and when its block ran.

    accelerate launch --multi_gpu --num_processes 2 tests/scripts/stop_together.py OUT
"""

import functools
import json
import sys
import time
from pathlib import Path

from accelerate import Accelerator

from vaswani.errors import UsageError
from vaswani.training.checkpoints import CheckpointManager
from vaswani.training.distributed import main_process_first, together

CASES = {  # name: (context, the rank whose block fails, or None)
    "main first, nobody fails": (main_process_first, None),
    "main first, the main process fails": (main_process_first, 0),
    "main first, the other process fails": (main_process_first, 1),
    "together, the other process fails": (together, 1),
    "together, nobody fails": (together, None),
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
    # A checkpoint whose write fails on the other process only (a full disk, say): both stop, nothing published.
    manager = CheckpointManager(Path(out).parent / "checkpoints")

    def write(folder: Path) -> None:
        if rank == 1:
            raise OSError(28, "No space left on device", str(folder / "rank1.bin"))
        (folder / "rank0.bin").write_bytes(b"weights")

    entry = report["checkpoint, the other process's write fails"] = {"error": None}
    try:
        manager.save(3, write, is_main_process=rank == 0, together=functools.partial(together, accelerator))
    except Exception as error:  # noqa: BLE001
        entry["error"] = [type(error).__name__, str(error)]
    entry["published"] = [path.name for path in manager.checkpoints()]
    Path(f"{out}.rank{rank}.json").write_text(json.dumps(report))
    accelerator.end_training()


if __name__ == "__main__":
    main(sys.argv[1])
