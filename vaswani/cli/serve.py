"""`vaswani serve`: an HTTP server translating with the model folders given at start-up (docs/serving.md).

    vaswani serve --model en-de=runs/base-avg5 --model runs/de-en [--host 127.0.0.1] [--port 5000]

Each `--model [SRC-TGT=]DIR` loads one folder (PyTorch or CTranslate2, through `Translator`) for its language pair
(`SRC-TGT=`, or the folder's run_args.json; `SRC-*=`: every target language of a multilingual model), once however
many pairs it serves. The server speaks the LibreTranslate API (/translate, /languages,
/detect), a native API (/v1/translate) and answers /health and /metrics; see `vaswani.serve.app`. It binds to
127.0.0.1 unless `--host` says otherwise, and stops on SIGINT or SIGTERM after answering the requests in flight.
Needs the `serve` extra (FastAPI, uvicorn).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from vaswani.cli.common import load_translator
from vaswani.errors import UsageError
from vaswani.inference.engines import BACKENDS
from vaswani.options import add_option, add_switch, non_negative_float, positive_float, positive_int

HELP = "serve translations over HTTP (LibreTranslate API and a native one)"
DESCRIPTION = (
    "Serve translations over HTTP: a translation page at /, the LibreTranslate API (POST /translate, GET /languages, "
    "POST /detect), a native API (POST /v1/translate), their OpenAPI description at GET /spec, GET /health and GET "
    "/metrics, with dynamic batching of concurrent requests. See docs/serving.md."
)


def port_number(text: str) -> int:
    """argparse type for --port: 0 (any free port) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be from 0 to 65535, got {value}")
    return value


# The options of `vaswani serve` of its own (the shared ones come from the registry, `vaswani.options`), in the order
# --help lists them after those.
SERVE_OPTIONS = {
    "--host": dict(default="127.0.0.1", help="the address to listen on (default: 127.0.0.1, this machine only; "
                                             "0.0.0.0 listens on every interface)"),
    "--port": dict(type=port_number, default=5000, help="the TCP port (default: 5000, LibreTranslate's; 0: any free one)"),
    "--max_wait_ms": dict(type=non_negative_float, default=0.0, metavar="MS",
                          help="how long a batch may wait for more requests while a worker is free (default: 0: a "
                               "free worker starts at once, and batches form while the workers are busy)"),
    "--max_request_bytes": dict(type=positive_int, default=1 << 20, metavar="N",
                             help="largest request body (default: 1 MiB); larger ones get 413"),
    "--max_request_characters": dict(type=positive_int, default=10000, metavar="N",
                             help="most characters of text in one request (default: 10000); more get 400"),
    "--max_request_sentences": dict(type=positive_int, default=200, metavar="N",
                            help="most sentences in one request after splitting (default: 200); more get 400"),
    "--max_request_seconds": dict(type=positive_float, default=30.0, metavar="S",
                                 help="longest a request may wait and decode (default: 30); longer ones get 408"),
    "--api_keys": dict(type=Path, metavar="FILE",
                       help="require an API key: FILE has one key per line, optionally followed by its own rate "
                            "limit (`KEY 120`); missing or wrong keys get 403"),
    "--rate_limit": dict(type=positive_float, metavar="N",
                         help="requests per minute per API key (per client address without --api_keys); more get "
                              "429 (default: no limit)"),
    "--cors_origins": dict(nargs="+", metavar="ORIGIN", default=[],
                           help="let web pages from these origins call the server (CORS; default: none). `*`: any"),
    "--log_texts": dict(action="store_true",
                        help="also log the texts of requests and their translations (default: only sizes and "
                             "timings)"),
}  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_option(
        parser, "model", "serve", required=True, action="append", type=str, metavar="[SRC-TGT=]DIR",
        help="a model folder (PyTorch, or CTranslate2 from vaswani export: chosen by the folder) and its language "
             "pair; without SRC-TGT= the pair is read from the folder's run_args.json; SRC-*= serves every target "
             "language of a multilingual model (its >>xx<< tokens). Repeat for more pairs; a folder given for "
             "several pairs is loaded once",
    )  # fmt: skip
    add_option(parser, "trust_remote_code", "serve")
    add_option(parser, "device", "serve", default="auto")
    add_option(parser, "backend", "serve", default="auto", choices=BACKENDS)
    add_option(parser, "threads", "serve", help="CPU threads for decoding (default: PyTorch's)")
    add_option(parser, "parallel_batches", "serve",
               help="ctranslate2 backend: batches decoded at once, each whole on threads / N cores (default: one per "
                    "core on CPU; 1 on GPU). PyTorch decodes one batch at a time")  # fmt: skip
    add_option(parser, "mixed_precision", "serve", default="no",
               help="compute type, as in vaswani translate: bf16/fp16 where the device computes it natively; no: "
                    "float32")  # fmt: skip
    add_option(parser, "max_source_length", "serve",
               help="truncate longer sentences to N tokens (default: the model's max_position_embeddings)")  # fmt: skip
    add_option(parser, "num_beams", "serve", default=4,
               help="beam size of LibreTranslate requests (paper: 4; the native API chooses its own)")  # fmt: skip
    add_option(parser, "length_penalty", "serve", default=0.6, help="of LibreTranslate requests (paper: 0.6)")
    add_option(parser, "max_tokens", "serve",
               help="token budget of a batch: its sentences x the source tokens of its longest, padding included, "
                    "as a batch decodes (default: vaswani translate's batch, 512 per decoding thread on a CPU, at most "
                    "4096; 4096 on a GPU)")  # fmt: skip
    for flag, settings in SERVE_OPTIONS.items():
        parser.add_argument(flag, **settings)
    add_switch(parser, "--web_ui", default=True,
               help="the translation page at / (default: on; --no_web_ui: the APIs only, / answers 404)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    try:  # start-up: the serve extra (FastAPI, uvicorn) is imported by this command only, when it runs
        from vaswani.serve.app import ServerSettings, create_app, listening_socket, run_server
    except ModuleNotFoundError as error:
        raise UsageError(f"vaswani serve needs the serve extra ({error.name} is missing): "
                         "pip install -c constraints.txt -e '.[serve]'") from None  # fmt: skip
    from vaswani.serve.limits import ApiKeys, Limits  # start-up: as above
    from vaswani.serve.models import load_models, parse_model_spec  # start-up: as above

    specs = [parse_model_spec(text, every_target=True) for text in args.model]
    limits = Limits(max_request_bytes=args.max_request_bytes, max_request_characters=args.max_request_characters,
                    max_request_sentences=args.max_request_sentences, max_request_seconds=args.max_request_seconds)  # fmt: skip
    settings = ServerSettings(
        limits=limits, max_tokens=args.max_tokens, max_wait=args.max_wait_ms / 1000, num_beams=args.num_beams,
        length_penalty=args.length_penalty, api_keys=ApiKeys.from_file(args.api_keys) if args.api_keys else None,
        rate_limit=args.rate_limit, cors_origins=args.cors_origins, log_texts=args.log_texts, web_ui=args.web_ui,
    )  # fmt: skip
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with listening_socket(args.host, args.port) as sock:  # first: a port in use is told before the models load
        models = load_models(specs, lambda folders: _load_translator(folders, args))
        if args.host not in ("127.0.0.1", "localhost", "::1") and args.api_keys is None:
            logging.getLogger("vaswani.serve").warning(
                "listening on %s without --api_keys: anyone who can reach this address can use the server", args.host
            )
        run_server(create_app(models, settings), sock, graceful_seconds=args.max_request_seconds + 5)
    return 0


def _load_translator(folders: list[Path], args: argparse.Namespace):
    """The translator of one pair: one folder, or an ensemble of several (the mean of their log-probabilities, as
    repeated --model in vaswani translate; PyTorch folders sharing one tokenizer, checked by `Translator`). The server
    sends it `parallel_batches` batches at once, each kept whole (`split_batches=False`, vaswani.serve.batching)."""
    return load_translator(folders, args, parallel_batches=args.parallel_batches, split_batches=False,
                           threads=args.threads)  # fmt: skip
