"""`reverser run --demo`: the service with the bundled recording replayed into it.

The demo package builds the settings and plays the recording; running it inside the service is
this layer's job (the demo sits below the service and does not import it).
"""

from __future__ import annotations

from pathlib import Path

from pipeline.commandline import installed_script, shell_word
from pipeline.config import Settings, split_host_port
from pipeline.demo.recording import load_recording
from pipeline.demo.runner import (
    DEMO_SECRET,
    PROVIDER,
    already_replayed,
    demo_age_key,
    demo_settings,
    ensure_bare_remote,
    git_history,
    replay_recording,
    wait_until_committed,
    write_demo_config,
    write_demo_discovery,
)
from pipeline.sealing.sealer import find_sops
from pipeline.service.app import Service, run_until_signalled

__all__ = ["run_demo"]


async def run_demo(base: Settings, *, once: bool) -> int:
    settings = demo_settings(base)
    remote = Path(settings.providers[0].url)
    ensure_bare_remote(remote)
    host, port = split_host_port(settings.audit.addr)
    audit_url = f"http://{host}:{port}/audit-webhook/{load_recording().cluster}"
    service = Service(settings)
    await service.start()
    try:
        if await already_replayed(service.log, settings):
            print(
                f"the demo was already replayed into {settings.workdir}; resuming from the log "
                "(delete that directory to start over)",
                flush=True,
            )
        else:
            print(f"replaying the demo recording into {settings.workdir} ...", flush=True)
            await replay_recording(service.log, settings, load_recording(), audit_url)
        await wait_until_committed(service.log, settings)
    finally:
        if once:
            await service.stop()
    print(git_history(remote), flush=True)
    key_file, _ = demo_age_key(settings.workdir)
    # Printed commands run as printed in a fresh shell: the venv's scripts by their path.
    sops = shell_word(find_sops())
    reverser = shell_word(installed_script("reverser") or "reverser")
    print(
        f"encrypted Secret: git --git-dir={shell_word(remote)} show main:{DEMO_SECRET} | "
        f"SOPS_AGE_KEY_FILE={shell_word(key_file)} {sops} decrypt --input-type yaml --output-type yaml "
        "/dev/stdin",
        flush=True,
    )
    print(f"git repository: {remote}", flush=True)
    config = shell_word(write_demo_config(settings))
    discovery = shell_word(write_demo_discovery(settings))
    anytime = (
        f"the watch streams of its rules: {reverser} watch-rules --config {config} --discovery {discovery}",
    )
    afterwards = (
        f"consumer lag: {reverser} lag --config {config}",
        f"rebuild the branch: {reverser} replay branch --config {config} --provider {PROVIDER} "
        f"--branch main --into {shell_word(settings.workdir / 'demo' / 'replayed.git')}",
        f"check the setup: {reverser} doctor --config {config}",
    )
    if once:
        for line in (*anytime, *afterwards):
            print(line, flush=True)
        return 0
    metrics_host, metrics_port = split_host_port(settings.metrics.addr)
    print(f"serving the audit webhook on {audit_url} until interrupted; meanwhile:", flush=True)
    print(
        f"consumer lag now (Burrow's API of the running service): curl -s "
        f"http://{metrics_host}:{metrics_port}/v3/kafka/{settings.lag.cluster_name}/consumer",
        flush=True,
    )
    for line in anytime:
        print(line, flush=True)
    print("after Ctrl-C (the service holds the embedded log until then):", flush=True)
    for line in afterwards:
        print(line, flush=True)
    await run_until_signalled(service, started=True)
    return 0
