"""Placeholder, being written (issue: labs chapters)."""

from __future__ import annotations

import argparse

from . import UserError


def add_arguments(p: argparse.ArgumentParser) -> None:
    pass


def main(args: argparse.Namespace) -> int:
    raise UserError("not implemented yet")
