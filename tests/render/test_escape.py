"""Each sink's escaping helper (gpuforge.render.escape), read back by that sink's own parser:
whatever text it writes comes back as exactly that text, one token, or it is refused."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuforge.render import escape
from tests.spec.hostile import FRAGMENTS, apt_config_dump, slurm_lines, systemd_words

#: Text built from what breaks sinks, and any other text.
TEXT = st.lists(st.sampled_from(FRAGMENTS), max_size=4).map("".join) | st.text(max_size=40)
SETTINGS = settings(max_examples=25, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))  # fmt: skip


def _one_line(value: str) -> bool:
    return not any(ord(c) < 0x20 or ord(c) == 0x7F or c in "\x85\u2028\u2029" for c in value)


@SETTINGS
@given(TEXT)
def test_a_shell_word_is_read_back_by_bash_as_one_argument(value: str) -> None:
    if "\x00" in value:
        with pytest.raises(ValueError, match="NUL"):
            escape.shell_word(value)
        return
    cp = subprocess.run(["bash", "-c", f"printf '%s\\0' {escape.shell_word(value)} x"], capture_output=True,
                        check=True)  # fmt: skip
    assert cp.stdout == value.encode() + b"\0x\0"


@SETTINGS
@given(TEXT)
def test_an_apt_conf_string_is_read_back_by_apt_config(value: str) -> None:
    if not _one_line(value) or '"' in value:
        with pytest.raises(ValueError):
            escape.apt_conf_string(value)
        return
    text = f"Gpuforge::Test {escape.apt_conf_string(value)};\n"
    assert apt_config_dump(text) == [("Gpuforge::Test", value)]


@SETTINGS
@given(TEXT)
def test_a_slurm_conf_value_is_read_back_as_one_value(value: str) -> None:
    if not _one_line(value) or not value or any(c in value for c in '#"\\'):
        with pytest.raises(ValueError):
            escape.slurm_conf_value(value)
        return
    assert slurm_lines(f"MessageTimeout={escape.slurm_conf_value(value)} Foo=bar\n") == [
        [("messagetimeout", value), ("foo", "bar")]
    ]


@SETTINGS
@given(st.lists(TEXT, min_size=1, max_size=3))
def test_a_systemd_command_line_splits_back_into_its_words(argv: list[str]) -> None:
    if not all(_one_line(a) for a in argv):
        with pytest.raises(ValueError):
            escape.systemd_exec(argv)
        return
    assert systemd_words(escape.systemd_exec(argv)) == argv


def test_systemd_analyze_accepts_a_quoted_command_line(tmp_path: Path) -> None:
    unit = tmp_path / "gpuforge-escape-test.service"
    line = escape.systemd_exec(["/bin/echo", 'a "b" $HOME %h', "c\\d", "{{ x }};"])
    unit.write_text(f"[Unit]\nDescription=t\n[Service]\nType=oneshot\nExecStart={line}\n")
    cp = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True,
                        check=False)  # fmt: skip
    assert cp.returncode == 0, cp.stdout + cp.stderr


@SETTINGS
@given(TEXT)
def test_a_sed_replacement_is_written_literally(value: str) -> None:
    if not _one_line(value):
        with pytest.raises(ValueError):
            escape.sed_replacement(value)
        return
    script = f"s#x#{escape.sed_replacement(value)}#"
    cp = subprocess.run(["sed", script], input=b"x\n", capture_output=True, check=True)
    assert cp.stdout == value.encode() + b"\n"
