"""vaswani/cli/common.py: the check of an --output file against the command's inputs."""

import pytest

from vaswani.cli.common import check_output_file
from vaswani.errors import UsageError


def test_an_output_that_is_an_input_is_refused(tmp_path):
    source = tmp_path / "input.txt"
    source.write_text("a\n")
    with pytest.raises(UsageError, match="is the input file"):
        check_output_file(source, inputs=[source])


def test_an_input_that_does_not_exist_is_no_reason_to_fail(tmp_path):
    """`vaswani card --model FOLDER` of a folder without run_args.json (an averaged or converted model): the card may
    be written over the folder's README.md; the missing input is not an error (it was `[Errno 2]`)."""
    card = tmp_path / "README.md"
    card.write_text("old card\n")
    check_output_file(card, inputs=[tmp_path / "config.json", tmp_path / "run_args.json", tmp_path / "results.json"])


def test_warnings_list_the_first_twenty_line_numbers():
    from vaswani.cli.common import shown_line_numbers

    assert shown_line_numbers([3, 7, 12]) == "3, 7, 12"
    assert shown_line_numbers(list(range(1, 21))) == ", ".join(map(str, range(1, 21)))
    assert shown_line_numbers(list(range(1, 26))) == ", ".join(map(str, range(1, 21))) + " ..."
