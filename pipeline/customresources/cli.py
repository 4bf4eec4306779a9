"""`reverser config check FILE|-` and `reverser config export`: custom resources offline.

`check` reads the objects (YAML, several documents or a `kind: List`), validates them exactly as
the controller does, and prints one line per object: its errors (naming the field), the fields
it does not support, or `ok`. `export` prints the custom resources for an existing YAML file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from pipeline.config import Settings, load_settings
from pipeline.customresources.commitrequest import check_lines
from pipeline.customresources.compile import CompiledConfig
from pipeline.customresources.export import ExportError, export_resources
from pipeline.customresources.objects import CustomResource, CustomResourceError, Kind, parse_object
from pipeline.customresources.state import publishable
from pipeline.exitcodes import ExitCode, usage_error

__all__ = ["read_documents", "register"]


def read_documents(text: str) -> list[Any]:
    """Every object of a YAML stream; `kind: List` documents are expanded; empty documents skipped."""
    objects: list[Any] = []
    for document in yaml.safe_load_all(text):
        if document is None:
            continue
        if isinstance(document, dict) and str(document.get("kind", "")).endswith("List"):
            objects.extend(document.get("items") or [])
        else:
            objects.append(document)
    return objects


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("config")
    commands = parser.add_subparsers(dest="config_command", required=True, metavar="SUBCOMMAND")
    schema = commands.add_parser("schema", help="print the configuration's JSON schema, fields described")
    schema.set_defaults(func=_schema)
    check = commands.add_parser("check", help="validate configbutler.ai custom resources offline")
    check.add_argument("file", help="YAML file of custom resources, or - for standard input")
    check.add_argument("--config", type=Path, help="the YAML configuration (its clusters and namespace)")
    check.add_argument("--namespace", help="the controller's namespace (default: custom_resources.namespace)")
    check.set_defaults(func=_check)
    export = commands.add_parser("export", help="print the custom resources for a YAML configuration")
    export.add_argument("--config", type=Path, required=True, help="the YAML configuration to export")
    export.add_argument("--namespace", help="namespace of the objects (default: custom_resources.namespace)")
    export.set_defaults(func=_export)


def _schema(_args: argparse.Namespace) -> int:
    print(json.dumps(Settings.model_json_schema(), indent=2))
    return 0


def _check(args: argparse.Namespace) -> int:
    try:
        base = load_settings(args.config)
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
        documents = read_documents(text)
    except OSError as exc:
        raise usage_error(f"cannot read {args.file}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise usage_error(f"{args.file} is not valid YAML: {exc}") from None
    namespace = args.namespace or base.custom_resources.namespace
    objects: list[CustomResource] = []
    failed = False
    for index, document in enumerate(documents):
        try:
            objects.append(parse_object(document))
        except CustomResourceError as exc:
            print(f"document {index}: {exc}")
            failed = True
    compiled = publishable(objects, home_namespace=namespace, base=base)
    print_report(compiled)
    lines, bad_requests = check_lines(o for o in objects if o.ref.kind is Kind.COMMIT_REQUEST)
    for line in lines:
        print(line)
    return ExitCode.FINDINGS if failed or bad_requests or compiled.errors else ExitCode.OK


def print_report(compiled: CompiledConfig) -> None:
    """One line per object and problem, the way `config check` and the controller's log say it."""
    for ref, report in sorted(compiled.reports.items()):
        for error in report.errors:
            print(f"{ref.describe()}: error: {error.describe()}")
        for path in report.unsupported:
            print(f"{ref.describe()}: unsupported (accepted, not acted on): {path}")
        if report.accepted and not report.unsupported:
            print(f"{ref.describe()}: ok")
    for problem in compiled.item_problems:
        print(
            f"{problem.ref.describe()}: spec.rules[{problem.item}] ({problem.resource}) "
            f"gets no stream: {problem.reason}: {problem.message}"
        )


def _export(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
        documents = export_resources(settings, args.namespace or settings.custom_resources.namespace)
    except ExportError as exc:
        raise usage_error(f"cannot export: {exc}") from None
    sys.stdout.write(yaml.safe_dump_all(documents, sort_keys=False, explicit_start=True))
    return ExitCode.OK
