"""`reverser doctor`: one command that says what is wrong with an installation and what to do.

It validates the configuration, then checks the log, every source cluster, every Git provider and
every audit route against the real systems, and exits 1 when any check failed. `--audit-setup`
prints instead what a cluster admin gives each kube-apiserver (policy, webhook kubeconfig, flags).
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from pipeline.config import ConfigError, Settings, load_settings, split_host_port
from pipeline.doctor.attribution_checks import check_attribution
from pipeline.doctor.audit_checks import check_routes
from pipeline.doctor.audit_setup import DEFAULT_CA_FILE, audit_setup, render_setup
from pipeline.doctor.cluster_checks import check_clusters
from pipeline.doctor.git_checks import check_providers
from pipeline.doctor.log_checks import check_log
from pipeline.doctor.report import Check, DoctorReport, Status, render
from pipeline.exitcodes import ExitCode
from pipeline.log import open_log
from pipeline.tables import OutputFormat, add_output_argument, document

__all__ = ["default_audit_url", "register", "run_doctor"]

DEFAULT_RECENT_S = 3600.0
_ANY_HOST = {"0.0.0.0", "::", ""}


def default_audit_url(settings: Settings) -> str:
    """The ingress as `audit.addr` describes it; behind a Service, pass `--audit-url` instead."""
    host, port = split_host_port(settings.audit.addr)
    scheme = "https" if settings.audit.tls.cert_file is not None else "http"
    if host in _ANY_HOST:
        host = "<audit-service-host>"
    return f"{scheme}://{host}:{port}"


def _config_checks(settings: Settings, source: str) -> list[Check]:
    return [
        Check(
            area="config",
            subject=source,
            check="valid",
            status=Status.OK,
            detail=f"{len(settings.clusters)} cluster(s), {len(settings.providers)} provider(s), "
            f"{len(settings.targets)} target(s), {len(settings.audit.routes)} audit route(s)",
        )
    ]


async def run_doctor(settings: Settings, *, source: str, recent_s: float, audit_url: str) -> DoctorReport:
    """Every check, in the order an operator fixes things: config, log, clusters, Git, audit,
    then who authors the commits (the attribution mode)."""
    report = DoctorReport()
    report.extend(_config_checks(settings, source))
    log = open_log(settings)
    try:
        log_checks = await check_log(settings, log)
        report.extend(log_checks)
        log_reachable = log_checks[0].status is Status.OK
        report.extend(await check_clusters(settings))
        report.extend(await check_providers(settings))
        if settings.audit.enabled and log_reachable:
            report.extend(await check_routes(settings, log, recent_s=recent_s, base_url=audit_url))
        report.extend(check_attribution(settings))
    finally:
        await log.close()
    return report


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("doctor")
    parser.add_argument("--config", type=Path, help="YAML configuration file (default: none)")
    parser.add_argument("--workdir", type=Path, help="state directory of the embedded log")
    add_output_argument(parser)
    parser.add_argument(
        "--facts-within-s",
        type=float,
        default=DEFAULT_RECENT_S,
        help=f"a route whose newest fact is older than this warns (default {DEFAULT_RECENT_S:g})",
    )
    parser.add_argument(
        "--audit-url", help="base URL the apiservers reach the audit ingress at (default: from audit.addr)"
    )
    parser.add_argument(
        "--audit-setup",
        action="store_true",
        help="print the audit policy, webhook kubeconfigs and kube-apiserver flags instead of checking",
    )
    parser.add_argument(
        "--audit-ca-file",
        default=DEFAULT_CA_FILE,
        help="with --audit-setup: path, on the apiserver host, of the CA that signed the ingress certificate",
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    source = str(args.config) if args.config else "(embedded defaults)"
    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        report = DoctorReport(
            checks=[
                Check(
                    area="config",
                    subject=source,
                    check="valid",
                    status=Status.FAIL,
                    detail=str(exc),
                    fix="correct the fields named above (every option is documented in README.md and docs/)",
                )
            ]
        )
        print(render(report, args.output))
        return ExitCode.FINDINGS
    if args.workdir is not None:
        settings = settings.model_copy(update={"workdir": args.workdir})
    audit_url = args.audit_url or default_audit_url(settings)
    if args.audit_setup:
        setup = audit_setup(settings, audit_url, args.audit_ca_file)
        if args.output is not OutputFormat.TABLE:
            print(document(setup.model_dump(mode="json"), args.output))
        else:
            print(render_setup(setup, settings))
        return 0
    report = asyncio.run(
        run_doctor(settings, source=source, recent_s=args.facts_within_s, audit_url=audit_url)
    )
    print(render(report, args.output))
    return ExitCode.OK if report.ok else ExitCode.FINDINGS
