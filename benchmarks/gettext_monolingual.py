"""English source text for issue 43's distillation: the messages of the gettext catalogs installed on this machine.

gettext-en-es (../shared/data) is made of the messages free-software packages translate with gettext. The catalogs
that Debian's packages install (/usr/share/locale/LANG/LC_MESSAGES/DOMAIN.mo) hold many more English messages of the
same packages: those without a Spanish translation, or translated only into other languages. Their English side is
in-domain text without references, what `vaswani distill --monolingual_file` takes: the teacher translates it too.

This writes, one per line, every English message (`msgid`; of a plural, its singular) of the catalogs under
`--locale_dir` that

- is not a source of any split of the corpus (train, validation, test; compared exactly, and, against validation and
  test, also without case and surrounding spaces),
- is one line, with its surrounding whitespace removed (the corpus's sources have none), and not empty,
- is at most as long as the corpus's longest source,
- does not come from a catalog of names (`iso_*`: languages, countries, scripts, currencies; `xkeyboard-config`:
  keyboard layouts), whose entries are not messages;

sorted, each once. The catalogs are read with Python's `gettext` (data only: a .mo file holds no code). The output is
written to a temporary file renamed when complete, and an existing file is never replaced.

    python benchmarks/gettext_monolingual.py --output runs/gettext-monolingual.en
"""

from __future__ import annotations

import argparse
import gettext
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from vaswani.fileio import write_file_atomically  # noqa: E402

DEFAULT_DATA = REPO.parent / "shared" / "data" / "gettext-en-es"
NAME_CATALOGS = ("iso_", "xkeyboard-config")  # catalogs of names, not of messages


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", type=Path, required=True, help="the text file to write (must not exist)")
    parser.add_argument("--data_dir", type=Path, default=DEFAULT_DATA,
                        help="the corpus: train.jsonl, validation.jsonl and test.jsonl (default: gettext-en-es)")  # fmt: skip
    parser.add_argument("--source_lang", default="en", help="the corpus's source language (default: en)")
    parser.add_argument("--locale_dir", type=Path, default=Path("/usr/share/locale"),
                        help="where the catalogs are: LANG/LC_MESSAGES/DOMAIN.mo (default: /usr/share/locale)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.output.exists():
        parser.error(f"--output {args.output} exists: give a new file (this script replaces nothing)")
    for split in ("train", "validation", "test"):
        if not (args.data_dir / f"{split}.jsonl").is_file():
            parser.error(f"--data_dir {args.data_dir} has no {split}.jsonl")
    if not args.locale_dir.is_dir():
        parser.error(f"--locale_dir {args.locale_dir} is not a folder")
    return args


def corpus_sources(data_dir: Path, split: str, source_lang: str) -> set[str]:
    with open(data_dir / f"{split}.jsonl", encoding="utf-8") as lines:
        return {json.loads(line)["translation"][source_lang] for line in lines if line.strip()}


def catalog_messages(path: Path) -> set[str] | None:
    """The English messages of one .mo catalog (a plural's singular; a context's message without its context), or
    None for a catalog Python's gettext cannot parse (a damaged file, a header it does not understand: IndexError,
    KeyError, ...): skipped and counted, since the catalogs are other packages' files."""
    try:
        with open(path, "rb") as stream:
            catalog = gettext.GNUTranslations(stream)._catalog
    except (OSError, UnicodeDecodeError, ValueError, IndexError, KeyError):
        return None
    messages = set()
    for key in catalog:
        msgid = key[0] if isinstance(key, tuple) else key
        if msgid:  # not the header (msgid "")
            messages.add(msgid.split("\x04")[-1])  # "context\x04message"
    return messages


def monolingual_messages(locale_dir: Path, data_dir: Path, source_lang: str) -> tuple[list[str], dict]:
    """The messages to write (see the module docstring) and how many each rule removed."""
    sources = {split: corpus_sources(data_dir, split, source_lang) for split in ("train", "validation", "test")}
    known = set().union(*sources.values())
    held_out = {s.strip().lower() for split in ("validation", "test") for s in sources[split]}
    longest = max(map(len, known))
    found, removed = set(), {"name catalogs": 0, "in the corpus": 0, "several lines": 0, "too long": 0}
    catalogs = unreadable = 0
    for path in sorted(locale_dir.glob("*/LC_MESSAGES/*.mo")):
        messages = catalog_messages(path)
        if messages is None:
            unreadable += 1
            continue
        catalogs += 1
        if path.stem.startswith(NAME_CATALOGS):
            removed["name catalogs"] += len(messages)
            continue
        for message in messages:
            text = message.strip()
            if not text:
                continue
            if "\n" in text or "\r" in text:
                removed["several lines"] += 1
            elif len(text) > longest:
                removed["too long"] += 1
            elif text in known or message in known or text.lower() in held_out:
                removed["in the corpus"] += 1
            else:
                found.add(text)
    counts = {"catalogs": catalogs, "unreadable catalogs": unreadable, "messages": len(found),
              "removed (with repeats)": removed}  # fmt: skip
    return sorted(found), counts


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    messages, counts = monolingual_messages(args.locale_dir, args.data_dir, args.source_lang)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    write_file_atomically(args.output, "".join(message + "\n" for message in messages))
    print(json.dumps(counts, indent=1))
    print(f"{len(messages):,} messages written to {args.output}", file=sys.stderr)
    return counts


if __name__ == "__main__":
    main()
