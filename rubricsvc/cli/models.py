"""``rubricsvc models ...``."""

from __future__ import annotations

import typer

from rubricsvc.backends.embedded import embedded_model_dir, is_prepared, prepare_embedded_model
from rubricsvc.cli.context import console
from rubricsvc.config import get_settings

models_app = typer.Typer(help="The embedded judge model.", no_args_is_help=True)


@models_app.command("prepare")
def models_prepare(
    force: bool = typer.Option(False, "--force", help="Convert again even if already prepared."),
) -> None:
    """Convert the bundled GGUF into a transformers folder (once) and print where it is."""
    root = get_settings().judge.model_dir
    target = embedded_model_dir(root)
    if is_prepared(target) and not force:
        console.print(f"Embedded model already prepared: {target}")
        return
    console.print(f"Converting the bundled SmolLM2-135M-Instruct GGUF into {target} ...")
    path = prepare_embedded_model(root, force=force)
    console.print(f"Embedded model prepared: {path}")


@models_app.command("path")
def models_path() -> None:
    """Print where the embedded model is (or would be) prepared."""
    target = embedded_model_dir(get_settings().judge.model_dir)
    console.print(f"{target} ({'prepared' if is_prepared(target) else 'not prepared'})")
