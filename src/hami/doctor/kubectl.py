"""``kubectl hami``: hami-doctor as a kubectl plugin (docs/guides/kubectl-plugin.md).

kubectl runs the ``kubectl-hami`` executable it finds on PATH with every argument after ``hami``,
untouched: its own ``--kubeconfig``, ``--context`` and ``-n/--namespace`` are not applied to a
plugin, so this entry point reads them the way kubectl does and hands the doctor the rest.
``kubectl hami pod NAME -n NS`` (or ``pod NS/NAME``) diagnoses the pod; without a namespace, the
context's namespace, else ``default``, as kubectl picks it. Every other subcommand and flag is the
doctor's (``kubectl hami nodes``, ``kubectl hami node NAME``, ``kubectl hami logs``, ...).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import yaml
from kubernetes.config import ConfigException
from kubernetes.config.kube_config import list_kube_config_contexts

from hami.doctor import main as doctor
from hami.doctor.findings import EXIT_USAGE

PROG = "kubectl hami"


def _kubectl_flags() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    p.add_argument("--kubeconfig", default="")
    p.add_argument("--context", default=None)
    p.add_argument("-n", "--namespace", default="")
    return p


def context_namespace(kubeconfig: str, context: str | None) -> str:
    """The namespace of ``context`` (default: the current one) in the kubeconfig, as kubectl reads
    it (``--kubeconfig``, else ``$KUBECONFIG``, else ~/.kube/config); ``default`` when it has none
    or the file cannot be read (the doctor then says what is wrong with it)."""
    try:
        contexts, current = list_kube_config_contexts(config_file=kubeconfig or None)
    except (ConfigException, OSError, yaml.YAMLError):
        return "default"
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else current
    namespace = ((chosen or {}).get("context") or {}).get("namespace")
    return namespace if isinstance(namespace, str) and namespace else "default"


def translate(argv: Sequence[str]) -> list[str]:
    """The doctor's arguments for ``kubectl hami`` ones; raises ``ValueError`` on a bad pod target."""
    known, rest = _kubectl_flags().parse_known_args(list(argv))
    out = list(rest)
    if known.kubeconfig:
        out += ["--kubeconfig", known.kubeconfig]
    if known.context:
        out += ["--context", known.context]
    command = next((arg for arg in rest if not arg.startswith("-")), None)
    if command == "pod":
        try:
            target = doctor.build_parser().parse_known_args(rest)[0].target
        except SystemExit:  # the doctor says what is wrong with them
            return out
        at = rest.index(target, rest.index("pod") + 1)
        if "/" not in target:
            namespace = known.namespace or context_namespace(known.kubeconfig, known.context)
            out[at] = f"{namespace}/{target}"
        elif known.namespace and not target.startswith(known.namespace + "/"):
            raise ValueError(f"pod {target} is not in namespace {known.namespace} (-n)")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(f"{PROG}: hami-doctor as a kubectl plugin, with kubectl's --kubeconfig, --context and "
              "-n/--namespace\n")
        return doctor.main(["--help"])
    try:
        return doctor.main(translate(args))
    except ValueError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
