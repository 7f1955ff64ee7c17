"""measure.py's help: ``--help`` lists the flags a person starts with (at most 30) and points at
``--help-all``, which lists every flag the parser accepts, grouped by topic; both fit a terminal.
The parser is a table (bandwidth/config/parser.py) and a short function that builds it."""

import ast
import re

import pytest
from conftest import ROOT
from test_config import readme_flags

from bandwidth.config.parser import FLAGS, TOPICS
from bandwidth.execution.commandline import build_parser

# MXNet's tools/bandwidth/measure.py had these (../shared/docs/mxnet-kvstore-spec.md, A.2).
MXNET_FLAGS = ("--network", "--gpus", "--num-layers", "--kv-store", "--num-batches",
               "--disp-batches", "--test-results", "--image-shape", "--num-classes",
               "--optimizer", "--gc-type")


def help_text(flag: str, capsys, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "80")             # argparse wraps to the terminal's width
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args([flag])
    assert done.value.code == 0
    return capsys.readouterr().out


def listed(text: str) -> list[list[str]]:
    """The flags of each option line of a help text (argparse indents them by 2), e.g.
    ``-b MINBYTES, --minbytes MINBYTES`` gives ["-b", "--minbytes"]."""
    entries = []
    for line in text.splitlines():
        if re.match(r"  -", line):
            invocation = re.split(r"\s{2,}", line.strip())[0]
            entries.append(re.findall(r"(?:^|, )(-{1,2}[a-z][a-z0-9-]*)", invocation))
    return entries


def test_help_lists_at_most_30_flags_and_names_help_all(capsys, monkeypatch):
    text = help_text("--help", capsys, monkeypatch)
    entries = listed(text)
    assert 20 <= len(entries) <= 30, [e[0] for e in entries]
    shown = {name for entry in entries for name in entry}
    assert shown >= set(MXNET_FLAGS) | {"--dtype", "--cpus", "--schedule", "--compute", "-b",
                                        "-e", "-f", "--json", "--csv", "--plot", "--baseline",
                                        "--save-baseline", "--tolerance", "--timeout",
                                        "--dry-run", "--help-all"}
    assert "--repeat" not in shown and "--server-keys" not in shown
    pointer = [line for line in text.split("examples:")[0].splitlines()[-3:]
               if "--help-all" in line]
    assert len(pointer) == 1, "one line after the flags points at --help-all"
    hidden = sum(not spec.short for spec in FLAGS)
    assert f"the other {hidden}" in pointer[0]


def test_help_all_lists_every_flag_the_parser_accepts(capsys, monkeypatch):
    text = help_text("--help-all", capsys, monkeypatch)
    shown = [name for entry in listed(text) for name in entry]
    # argparse has no public list of its actions; _actions is stable since Python 3.2.
    accepted = [name for action in build_parser()._actions for name in action.option_strings]
    assert len(accepted) > 70
    assert sorted(shown) == sorted(accepted)


def test_help_all_groups_the_flags_by_topic(capsys, monkeypatch):
    text = help_text("--help-all", capsys, monkeypatch)
    sections = re.split(r"(?m)^([a-z][^\n]*):\n", text.split("\nexamples:")[0])
    titles = sections[1::2]
    assert titles == ["options", *TOPICS]
    assert all(len(title) <= 20 for title in TOPICS)
    for title, body in zip(titles[1:], sections[4::2]):
        in_section = {name for entry in listed(body) for name in entry}
        expected = {name for spec in FLAGS if spec.group == title for name in spec.names}
        assert in_section == expected, title


def test_every_flag_of_readme_table_is_in_help_all(capsys, monkeypatch):
    text = help_text("--help-all", capsys, monkeypatch)
    shown = {name for entry in listed(text) for name in entry}
    documented = readme_flags()
    assert "--help-all" in documented
    assert sorted(documented - shown) == []


@pytest.mark.parametrize("flag", ["--help", "--help-all"])
def test_help_fits_a_terminal(flag, capsys, monkeypatch):
    text = help_text(flag, capsys, monkeypatch)
    assert text.startswith("usage: measure.py ")
    assert max(len(line) for line in text.splitlines()) <= 100


def test_the_table_names_each_flag_once_under_a_topic():
    names = [name for spec in FLAGS for name in spec.names]
    assert len(names) == len(set(names))
    assert {spec.group for spec in FLAGS} == set(TOPICS)


def test_help_all_from_the_command_line(cli):
    done = cli("--help-all", script="bandwidth/measure.py")
    assert done.returncode == 0, done.stderr
    assert "--server-takes" in done.stdout and "--help-all" in done.stdout


def test_config_functions_fit_on_a_screen():
    """The parser is a table and a short function; no function of config/ passes 80 lines."""
    for path in sorted((ROOT / "bandwidth" / "config").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                assert length <= 80, f"{path.name}: {node.name} has {length} lines"
