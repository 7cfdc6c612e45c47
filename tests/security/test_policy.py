"""Policies a pod author or a container image cannot undo: the webhook's scope is set by namespace
labels alone, and the image runs as a non-root user unless a manifest says otherwise."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_only_a_namespace_label_exempts_pods_from_the_webhook() -> None:
    # deploy/hami.yaml: the chart rendered with its defaults
    (config,) = [
        d for d in yaml.safe_load_all((ROOT / "deploy" / "hami.yaml").read_text(encoding="utf-8"))
        if d and d["kind"] == "MutatingWebhookConfiguration"
    ]
    for hook in config["webhooks"]:
        # a pod's own labels are its author's: an objectSelector on them is a switch for the author
        assert "objectSelector" not in hook
        keys = {e["key"] for e in hook["namespaceSelector"]["matchExpressions"]}
        assert keys == {"hami.io/webhook"}


def test_the_image_runs_as_a_non_root_user() -> None:
    lines = [line.split() for line in (ROOT / "Dockerfile").read_text(encoding="utf-8").splitlines()]
    final = max(i for i, words in enumerate(lines) if words[:1] == ["FROM"])
    users = [words[1] for words in lines[final:] if words[:1] == ["USER"]]
    assert users, "the final stage sets no USER: the daemons would run as root"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0  # numeric, so runAsNonRoot can check it
