"""docs/cli.md's command reference is generated from the CLI: a command, option or help text
changed without regenerating it fails here (the review found cli.md missing slurm-upgrade, image
build, lab box, and --tags values)."""

from __future__ import annotations

from pathlib import Path

from gpuforge import cli_reference

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_docs_cli_md_holds_the_current_generated_reference() -> None:
    text = DOC.read_text()
    assert cli_reference.spliced(text, cli_reference.reference()) == text, (
        "docs/cli.md is stale: run python -m gpuforge.cli_reference --write docs/cli.md"
    )


def test_every_command_and_option_of_the_cli_is_in_the_reference() -> None:
    generated = cli_reference.reference()
    for name in ("gpuforge slurm-upgrade", "gpuforge image build", "gpuforge lab box", "gpuforge validate"):
        assert f"### `{name}`" in generated
    assert "storage, munge, nvidia, fabric" in generated  # --tags lists every layer the CLI takes
    assert "`--detailed-exitcode`" in generated


def test_splicing_keeps_the_prose_around_the_generated_part() -> None:
    doc = f"intro\n\n{cli_reference.BEGIN}\nold\n{cli_reference.END}\n\nafter\n"
    assert cli_reference.spliced(doc, "new\n") == f"intro\n\n{cli_reference.BEGIN}\nnew\n{cli_reference.END}\n\nafter\n"
    assert cli_reference.spliced("intro\n", "new\n") == f"intro\n\n{cli_reference.BEGIN}\nnew\n{cli_reference.END}\n"
