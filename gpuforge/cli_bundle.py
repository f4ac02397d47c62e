"""``gpuforge bundle`` (registered by :mod:`gpuforge.cli`) and its helpers: the key fingerprint option,
``--verify``, what a build did."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuforge.console import console
from gpuforge.spec import load_or_exit

if TYPE_CHECKING:
    from gpuforge.bundle.build import BundleResult

out = console()
err = console(stderr=True)


def say(message: str) -> None:
    err.print(message, markup=False, highlight=False)


def fingerprint_option(value: str | None) -> str | None:
    """``--fingerprint`` as the one form comparisons use, or exit 2 naming what is wrong."""
    from gpuforge.spec.openpgp import openpgp_fingerprint

    if value is None:
        return None
    try:
        return openpgp_fingerprint(value)
    except ValueError as e:
        err.print(f"--fingerprint: {e}", markup=False, highlight=False)
        raise typer.Exit(2) from None


def verify_bundle_dir(bundle_dir: Path, pin: str | None, json_out: bool) -> None:
    """``bundle --verify``: exit 0 when the bundle checks out against the pinned key, 1 when it
    does not, 2 when no key is pinned (nothing is checked: the bundle cannot vouch for itself)."""
    from gpuforge.bundle.verify import verify_bundle

    if pin is None:
        err.print(
            f"{bundle_dir}: not verified: --verify needs --fingerprint FPR, the bundle key fingerprint "
            "'gpuforge bundle' printed (or SPEC with sources.bundle_fingerprint); a bundle's own manifest "
            "and key cannot vouch for it",
            markup=False,
            highlight=False,
        )
        raise typer.Exit(2)
    problems = verify_bundle(bundle_dir, pin)
    if json_out:
        print(json.dumps({"ok": not problems, "fingerprint": pin, "problems": problems}, indent=2))
    else:
        for p in problems:
            err.print(f"{bundle_dir}: {p}", markup=False, highlight=False)
        summary = f"{bundle_dir}: {f'OK (signed by {pin})' if not problems else f'{len(problems)} problem(s)'}"
        out.print(summary, markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(1 if problems else 0)


def print_bundle(result: BundleResult, output: Path, pinned: str | None) -> None:
    """What a build did, the bundle key's fingerprint to pin, and whether the spec's pin still holds."""
    m = result.manifest
    size = sum(f["size"] for f in m["files"])
    out.print(
        f"{output}: {len(m['files'])} files ({size / 2**20:.1f} MiB): {result.downloaded} downloaded, "
        f"{result.reused} reused, {result.removed} stale removed",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    for r in m["repositories"]:
        ext = len(r["external"])
        signers = sorted({src["signed_by"] for src in r["sources"] if src.get("signed_by")})
        checked = sorted({src["checked"] for src in r["sources"] if src.get("checked") and not src.get("signed_by")})
        signed = f", index signed by {', '.join(signers)}" if signers else ""
        signed += f", checked: {', '.join(checked)}" if checked else ""
        line = f"  {r['path']}/: {len(r['packages'])} packages, {ext} external dependencies{signed}"
        out.print(line, soft_wrap=True, markup=False, highlight=False)
    key = m["signing"].get("fingerprint") if m["signing"] else None
    if key:
        out.print(f"  signed with bundle key {key} ({m['signing']['key']}, manifest.json.asc)", soft_wrap=True)
        out.print(f"  pin it: sources.bundle_fingerprint: {key}", soft_wrap=True, markup=False, highlight=False)
        if pinned is not None and pinned != key:
            err.print(
                f"the bundle key changed: sources.bundle_fingerprint is {pinned}, this bundle is signed by {key} "
                "(a build that changes the bundle signs it with a new key): pin the new one",
                markup=False,
                highlight=False,
            )
    for miss in m["missing"]:
        err.print(f"missing {miss['what']}: {miss['error']}", markup=False, highlight=False)
    out.print("complete" if result.complete else "INCOMPLETE: see manifest.json (missing)", soft_wrap=True)


FINGERPRINT_HELP = (
    "The bundle key's fingerprint as 'gpuforge bundle' printed it (--verify needs it, or SPEC's "
    "sources.bundle_fingerprint); when building, the existing key is kept only if it is this one"
)


def bundle(
    spec: Annotated[Path | None, typer.Argument(help="Cluster spec (YAML)", exists=False)] = None,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Bundle directory to fill")] = None,
    verify: Annotated[
        Path | None,
        typer.Option("--verify", help="Check this bundle: its manifest signed by the pinned key, then every file"),
    ] = None,
    fingerprint: Annotated[str | None, typer.Option("--fingerprint", help=FINGERPRINT_HELP)] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="The bundle's manifest (or the --verify result) as JSON on stdout")
    ] = False,
) -> None:
    """Gather the NVIDIA stack's packages and release files for offline mode (or --verify a bundle).
    An offline SPEC need not pin sources.bundle_fingerprint yet: the build prints the key to pin."""
    from gpuforge.bundle.build import build_bundle
    from gpuforge.bundle.build import tools_missing as bundle_tools_missing
    from gpuforge.spec.load import UNPINNED_BUNDLE

    pin = fingerprint_option(fingerprint)
    if verify is not None:
        if pin is None and spec is not None:
            pin = load_or_exit(spec, UNPINNED_BUNDLE).sources.bundle_fingerprint
        verify_bundle_dir(verify, pin, json_out)
    if spec is None or output is None:
        err.print("usage: gpuforge bundle SPEC -o DIR, or gpuforge bundle --verify DIR --fingerprint FPR", markup=False)
        raise typer.Exit(2)
    s = load_or_exit(spec, UNPINNED_BUNDLE)
    missing_tools = bundle_tools_missing(s)
    if missing_tools:
        err.print(
            f"gpuforge bundle checks and makes repository signatures with {', '.join(missing_tools)}, "
            "which this host lacks: apt-get install gnupg rpm (dnf install gnupg2 rpm)",
            markup=False,
            highlight=False,
        )
        raise typer.Exit(2)
    try:
        result = build_bundle(s, spec, output, log=say, fingerprint=pin)
    except OSError as e:
        err.print(f"cannot write the bundle in {output}: {e}", markup=False, highlight=False)
        raise typer.Exit(2) from None
    if json_out:
        print(json.dumps(result.manifest, indent=2))
    else:
        print_bundle(result, output, pin or s.sources.bundle_fingerprint)
    raise typer.Exit(0 if result.complete else 1)
