"""benchmarks/gettext_monolingual.py: the English messages of gettext catalogs that are not in the corpus, read from
.mo files written here in GNU's format (the reader is Python's gettext), each rule of the script's docstring."""

import json
import struct
import sys

import pytest
from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import gettext_monolingual  # noqa: E402

HEADER = "Content-Type: text/plain; charset=UTF-8\nPlural-Forms: nplurals=2; plural=(n != 1);\n"


def write_mo(path, messages: dict) -> None:
    """A GNU .mo catalog of `messages` (msgid -> msgstr; the header under ""), as msgfmt writes it: the magic
    number, the tables of (length, offset) of the sorted msgids and of their msgstrs, then the strings."""
    entries = sorted({"": HEADER, **messages}.items())
    ids = b"".join(key.encode() + b"\0" for key, _ in entries)
    strs = b"".join(value.encode() + b"\0" for _, value in entries)
    count, start = len(entries), 7 * 4 + 16 * len(entries)
    id_table, str_table, offset = [], [], 0
    for key, _ in entries:
        id_table += [len(key.encode()), start + offset]
        offset += len(key.encode()) + 1
    offset = 0
    for _, value in entries:
        str_table += [len(value.encode()), start + len(ids) + offset]
        offset += len(value.encode()) + 1
    head = struct.pack("Iiiiiii", 0x950412DE, 0, count, 7 * 4, 7 * 4 + 8 * count, 0, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(head + struct.pack(f"{2 * count}i", *id_table) + struct.pack(f"{2 * count}i", *str_table)
                     + ids + strs)  # fmt: skip


@pytest.fixture
def corpus(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    splits = {"train": ["Open file", "A message of exactly forty characters.."], "validation": ["Save As"],
              "test": ["Quit the program"]}  # fmt: skip
    for split, sources in splits.items():
        (data / f"{split}.jsonl").write_text("".join(json.dumps({"translation": {"en": s, "es": "x"}}) + "\n"
                                                     for s in sources))  # fmt: skip
    locale = tmp_path / "locale"
    write_mo(locale / "es" / "LC_MESSAGES" / "tool.mo", {
        "Open file": "Abrir archivo",  # a training source
        "save as": "Guardar como",  # a validation source but for its case
        "  Close the window\n": "Cerrar",  # surrounding whitespace: stripped
        "Line one\nline two": "x",  # several lines
        "menu\x04Print": "Imprimir",  # with a context: the message
        "x" * 41: "y",  # longer than the corpus's longest source (39 characters)
    })  # fmt: skip
    write_mo(locale / "fr" / "LC_MESSAGES" / "tool.mo", {"Print": "Imprimer", "Undo": "Annuler"})
    write_mo(locale / "fr" / "LC_MESSAGES" / "iso_3166-1.mo", {"Spain": "Espagne"})  # names, not messages
    (locale / "de" / "LC_MESSAGES").mkdir(parents=True)
    (locale / "de" / "LC_MESSAGES" / "broken.mo").write_bytes(b"\x00" * 8)
    return data, locale


def test_the_messages_are_those_outside_the_corpus_one_line_each_stripped_sorted_and_once(corpus, tmp_path, capsys):
    data, locale = corpus
    out = tmp_path / "out" / "mono.en"
    counts = gettext_monolingual.main(["--output", str(out), "--data_dir", str(data), "--locale_dir", str(locale)])
    assert out.read_text(encoding="utf-8").splitlines() == ["Close the window", "Print", "Undo"]
    assert counts["catalogs"] == 3 and counts["unreadable catalogs"] == 1 and counts["messages"] == 3
    assert counts["removed (with repeats)"] == {"name catalogs": 1, "in the corpus": 2, "several lines": 1,
                                                "too long": 1}  # fmt: skip
    # nothing is replaced: the same command again is refused, the file as it was
    with pytest.raises(SystemExit) as stop:
        gettext_monolingual.main(["--output", str(out), "--data_dir", str(data), "--locale_dir", str(locale)])
    assert stop.value.code == 2 and "exists: give a new file" in capsys.readouterr().err
    assert out.read_text(encoding="utf-8").splitlines() == ["Close the window", "Print", "Undo"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--data_dir", "{tmp}/nowhere"], "has no train.jsonl"),
        (["--locale_dir", "{tmp}/nowhere"], "--locale_dir {tmp}/nowhere is not a folder"),
    ],
)
def test_bad_folders_are_refused(corpus, tmp_path, capsys, argv, message):
    data, locale = corpus
    argv = ["--output", str(tmp_path / "o.en"), "--data_dir", str(data), "--locale_dir", str(locale)] + [
        a.format(tmp=tmp_path) for a in argv
    ]
    with pytest.raises(SystemExit) as stop:
        gettext_monolingual.main(argv)
    assert stop.value.code == 2 and message.format(tmp=tmp_path) in capsys.readouterr().err
