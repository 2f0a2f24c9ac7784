"""Reading Kubernetes manifests and Helm values files: the containers that run llama-server.

Kubernetes (Pod, Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob, ...): each
container's ``command`` (the image's ENTRYPOINT) and ``args`` (its CMD) are lists, one item one
argv word, exactly as written, with the line of the item. ``$(VAR)`` in them is expanded from the
container's ``env`` (values, ``valueFrom.configMapKeyRef`` and ``envFrom`` ConfigMaps defined in
the same file); ``$$`` is a literal ``$``; a reference to a variable the container does not have
stays as written (https://kubernetes.io/docs/tasks/inject-data-application/define-command-argument-container/,
"Use environment variables to define arguments"; the Container reference,
https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/#entrypoint: "If a
variable cannot be resolved, the reference in the input string will be unchanged. Double $$ are
reduced to a single $"). An item that is not a string (``- 8080``) is
rejected by the API server (args are ``[]string``), which a note says.

Helm values (``values.yaml``): any mapping with ``command``/``args``/``extraArgs`` read the same
way; a *mapping* under ``args`` is rendered as charts such as rockofox/helm-llama-cpp
(templates/deployment.yaml) do: ``--KEY VALUE`` per key in sorted key order (Go templates range
over a map in key order), ``--KEY`` alone when the value is empty, false, 0 or null. The chart's
own template may add arguments of its own, which a values file cannot show.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from llamarig.flags.findings import Severity
from llamarig.flags.parsed import Invocation, Note, Word
from llamarig.flags.readers import yaml_nodes as Y
from llamarig.flags.readers.common import looks_like_server_args
from llamarig.flags.readers.containers import (
    Env,
    Found,
    attach_note,
    container_invocations,
    merge_found,
)
from llamarig.flags.readers.located import ShellSyntaxError, split_words
from llamarig.i18n import _

if TYPE_CHECKING:
    from yaml.nodes import Node

#: workload kinds and the path from the document to their pod spec
POD_SPEC_PATHS = {
    "Pod": ("spec",),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "ReplicationController": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
    "PodTemplate": ("template", "spec"),
}

_REF_RE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_EXTRA_KEYS = ("extraArgs", "extra_args", "extraArguments", "additionalArgs")


def is_workload(doc: Node) -> bool:
    kind = Y.text_of(Y.get(doc, "kind"))
    return kind in POD_SPEC_PATHS or kind == "List"


def config_maps(docs: list[Node]) -> dict[str, list[tuple[str, str, int]]]:
    """ConfigMaps defined in the file: name -> [(key, value, line)]."""
    out: dict[str, list[tuple[str, str, int]]] = {}
    for d in docs:
        if Y.text_of(Y.get(d, "kind")) != "ConfigMap":
            continue
        name = Y.text_of(Y.get(Y.get(d, "metadata"), "name")) or ""
        out[name] = [(k, Y.text_of(v) or "", Y.line(kn)) for k, kn, v in Y.items(Y.get(d, "data"))]
    return out


def read_kubernetes(doc: Node, src: Y.Source, cms: dict[str, list[tuple[str, str, int]]]) -> Found:
    """The llama-server invocations of one workload document."""
    kind = Y.text_of(Y.get(doc, "kind")) or ""
    if kind == "List":
        invs: list[Invocation] = []
        notes: list[Note] = []
        for item in (Y.get(doc, "items").value if Y.is_seq(Y.get(doc, "items")) else []):  # type: ignore[union-attr]
            merge_found((invs, notes), read_kubernetes(item, src, cms))
        return invs, notes
    spec: Node | None = doc
    for key in POD_SPEC_PATHS.get(kind, ()):
        spec = Y.get(spec, key)
    name = Y.text_of(Y.get(Y.get(doc, "metadata"), "name")) or "?"
    found: Found = ([], [])
    for group in ("initContainers", "containers"):
        for c in Y.seq(Y.get(spec, group)):
            if not Y.is_map(c):
                continue
            cname = Y.text_of(Y.get(c, "name")) or "?"
            label = _("{kind}/{name} container {container}").format(kind=kind, name=name, container=cname)
            env, known, env_notes = _container_env(c, cms, label)
            notes = list(env_notes)
            entry = _argv_list(Y.get(c, "command"), src, "command", label, notes)
            cmd = _argv_list(Y.get(c, "args"), src, "args", label, notes)
            entry = _expand_refs(entry, known, label, notes) if entry is not None else None
            cmd = _expand_refs(cmd, known, label, notes) if cmd is not None else None
            invs, more = container_invocations(entry, cmd, Y.text_of(Y.get(c, "image")) or "", env,
                                               "kubernetes", label, Y.line(c))
            if invs:
                merge_found(found, (invs, [attach_note(n) for n in notes] + more))
    return found


def _container_env(c: Node, cms: dict[str, list[tuple[str, str, int]]], label: str
                   ) -> tuple[Env, dict[str, str | None], list[Note]]:
    """The container's environment: envFrom first, then env (which wins on a duplicate);
    ``known`` maps each name to its value (None when it comes from a Secret, the downward API
    or a ConfigMap not in this file)."""
    env: Env = []
    known: dict[str, str | None] = {}
    notes: list[Note] = []
    ef = Y.get(c, "envFrom")
    for src_node in (ef.value if Y.is_seq(ef) else []):  # type: ignore[union-attr]
        prefix = Y.text_of(Y.get(src_node, "prefix")) or ""
        ref = Y.get(src_node, "configMapRef")
        cm = Y.text_of(Y.get(ref, "name")) if ref is not None else None
        if cm is not None and cm in cms:
            for k, v, ln in cms[cm]:
                env.append((prefix + k, v, ln))
                known[prefix + k] = v
        elif ref is not None or Y.get(src_node, "secretRef") is not None:
            what = _("ConfigMap {name}").format(name=cm) if cm else _("a Secret")
            notes.append(Note("unknown-variable", Y.line(src_node),
                              _("{label}: the variables of {what} (envFrom) are not in this file: `$(NAME)` "
                                "references to them are checked as written").format(label=label, what=what),
                              Severity.INFO))
    ev = Y.get(c, "env")
    for item in (ev.value if Y.is_seq(ev) else []):  # type: ignore[union-attr]
        n = Y.text_of(Y.get(item, "name"))
        if not n:
            continue
        vnode = Y.get(item, "value")
        vf = Y.get(item, "valueFrom")
        if vf is not None:
            # valueFrom.configMapKeyRef of a ConfigMap in this file: its value; a Secret, the
            # downward API, a ConfigMap defined elsewhere: not known here
            ref = Y.get(vf, "configMapKeyRef")
            cm, key = Y.text_of(Y.get(ref, "name")), Y.text_of(Y.get(ref, "key"))
            hit = next((v for k, v, _ln in cms.get(cm or "", ()) if k == key), None) if ref is not None else None
            known[n] = hit
            env.append((n, hit or "", Y.line(item)))
            continue
        v = _expand_text(Y.text_of(vnode) or "", known)  # dependent variables: earlier ones only
        known[n] = v
        env.append((n, v, Y.line(item)))
    return env, known, notes


def _expand_text(text: str, known: dict[str, str | None]) -> str:
    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        v = known.get(m.group(1))
        return m.group(0) if v is None else v

    return _REF_RE.sub(sub, text) if "$" in text else text


def _expand_refs(words: list[Word], known: dict[str, str | None], label: str, notes: list[Note]) -> list[Word]:
    out = []
    for w in words:
        if "$" in w.text:
            for m in _REF_RE.finditer(w.text):
                name = m.group(1)
                if name is None or known.get(name) is not None:
                    continue
                why = (_("comes from a Secret, a ConfigMap not in this file or the downward API")
                       if name in known else
                       _("is not defined for this container: Kubernetes passes `$({name})` as written").format(
                           name=name))
                notes.append(Note("unknown-variable", w.line,
                                  _("{label}: `$({name})` {why}; checked as written").format(
                                      label=label, name=name, why=why), Severity.INFO))
            w = Word(_expand_text(w.text, known), w.line)
        out.append(w)
    return out


def _argv_list(node: Node | None, src: Y.Source, key: str, label: str, notes: list[Note]) -> list[Word] | None:
    """A Kubernetes ``command``/``args``: a list, one item one word (None when absent). A string
    there is not valid for the API server; it is split like a shell would, with a note."""
    if node is None or (Y.is_scalar(node) and Y.text_of(node) is None):
        return None
    if Y.is_seq(node):
        words = []
        for item in node.value:
            if not Y.is_scalar(item):
                continue
            t = Y.text_of(item)
            if Y.style(item) is None and (item.tag.endswith((":int", ":float", ":bool")) or t is None):
                notes.append(Note("yaml-not-string", Y.line(item),
                                  _("{label}: `{key}` item `{value}` is not a string: the API server rejects it "
                                    "(json: cannot unmarshal into []string); quote it: \"{value}\"").format(
                                      label=label, key=key, value=item.value),
                                  Severity.ERROR))
            words.append(Word(str(item.value), Y.locate(item, src).line_at(0)))
        return words
    if Y.is_scalar(node):
        try:
            return split_words(Y.locate(node, src))
        except ShellSyntaxError as e:
            notes.append(Note("shell-syntax", Y.line(node), f"{label}: {key}: " + str(e), Severity.ERROR))
            return []
    return None


# ----------------------------------------------------------------------------- Helm values


def read_helm_values(doc: Node, src: Y.Source) -> Found:
    """Every mapping of a values file with ``command``/``args``/``extraArgs`` that starts
    llama-server (by its program, a llama.cpp image, or arguments only llama-server takes)."""
    found: Found = ([], [])
    stack: list[tuple[Node, str, str]] = [(doc, "", "")]  # node, dotted path, image in scope
    while stack:
        node, path, image = stack.pop()
        if not Y.is_map(node):
            if Y.is_seq(node):
                for i, it in reversed(list(enumerate(node.value))):
                    stack.append((it, f"{path}[{i}]", image))
            continue
        image = _image_of(node) or image
        keys = {k for k, _, _ in Y.items(node)}
        if keys & ({"command", "args"} | set(_EXTRA_KEYS)):
            merge_found(found, _helm_block(node, src, path or "(top level)", image))
        for k, _node, v in reversed(list(Y.items(node))):
            if k in ("command", "args", "env", "extraEnv") or k in _EXTRA_KEYS:
                continue
            stack.append((v, f"{path}.{k}" if path else k, image))
    return found


def _image_of(node: Node) -> str | None:
    img = Y.get(node, "image")
    if Y.is_scalar(img):
        return Y.text_of(img)
    if Y.is_map(img):
        repo = Y.text_of(Y.get(img, "repository")) or ""
        reg = Y.text_of(Y.get(img, "registry"))
        tag = Y.text_of(Y.get(img, "tag"))
        if repo:
            return (f"{reg}/" if reg else "") + repo + (f":{tag}" if tag else "")
    return None


def _helm_block(node: Node, src: Y.Source, path: str, image: str) -> Found:
    label = _("values {path}").format(path=path)
    notes: list[Note] = []
    entry = _argv_list(Y.get(node, "command"), src, "command", label, notes)
    args = _helm_args(Y.get(node, "args"), src, label, notes)
    for k in _EXTRA_KEYS:
        extra = _helm_args(Y.get(node, k), src, label, notes)
        if extra is not None:
            args = (args or []) + extra
    env: Env = []
    for key in ("env", "extraEnv"):
        ev = Y.get(node, key)
        if Y.is_seq(ev):
            for item in Y.seq(ev):
                n = Y.text_of(Y.get(item, "name"))
                if n:
                    env.append((n, Y.text_of(Y.get(item, "value")) or "", Y.line(item)))
        else:
            for k, kn, v in Y.items(ev):
                env.append((k, Y.text_of(v) or "", Y.line(kn)))
    if entry is None and not image and not looks_like_server_args(args or []) \
            and not (args and not args[0].text.startswith("-")):
        return [], []
    invs, more = container_invocations(entry, args, image, env, "helm-values", label, Y.line(node))
    return invs, ([attach_note(n) for n in notes] + more) if invs else []


def _helm_args(node: Node | None, src: Y.Source, label: str, notes: list[Note]) -> list[Word] | None:
    if Y.is_map(node):
        out = []
        for k, kn, v in sorted(Y.items(node), key=lambda t: t[0]):
            out.append(Word(f"--{k}", Y.line(kn)))
            t = Y.text_of(v)
            falsy = t is None or t == "" or (Y.style(v) is None and (
                (v.tag.endswith(":bool") and t.lower() == "false")
                or (v.tag.endswith((":int", ":float")) and re.fullmatch(r"[-+]?0*\.?0*", t) is not None)))
            if not falsy and Y.is_scalar(v):
                out.append(Word(str(t), Y.line(v)))
        return out
    return _argv_list(node, src, "args", label, notes)
