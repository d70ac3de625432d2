"""The `voxgate` command (pyproject's entry point `voxgate.gateway.cli:main`) and its subcommands, one module each:
`serve` (the gateway, or `supervisor` over several GPUs, on the GPU `devices` names) and `say` (a listener)."""

from .main import main

__all__ = ["main"]
