"""Issue 25 item 3, messages as values: a library result (a Finding, a Plan's notes, an error) is
English under a Chinese locale and reads in Chinese through ``llamarig.i18n.localize``; nothing
outside cli/ and i18n.py switches or reads a process-wide language (docs/architecture.md, "The
user's language")."""

from __future__ import annotations

import ast
import copy
import json
import pickle
import re
from pathlib import Path

import pytest

import llamarig
from llamarig.errors import LlamarigError
from llamarig.i18n import Message, _, join, localize

SRC = Path(llamarig.__file__).resolve().parent
CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")


def test_a_finding_is_english_and_localizes_to_chinese(chinese_locale) -> None:
    findings = llamarig.check_text("llama-server -m m.gguf -ctk q2_K -fa on --max-slots 4\n")
    by_rule = {f.rule: f for f in findings}
    bad, lore = by_rule["invalid-value"], by_rule["unknown-flag"]
    for f in (bad, lore):
        assert not CJK.search(f.message) and not CJK.search(f.fix or ""), f
        assert CJK.search(localize(f.message, "zh")) and CJK.search(localize(f.fix, "zh")), f
        assert localize(f.message, "en") == f.message
        assert json.loads(json.dumps(f.to_json()))["message"] == f.message  # the JSON: English
    assert "unsupported cache type" in bad.message and "不支持的缓存类型" in localize(bad.message, "zh")
    # folklore advice written in Chinese beside the English (flags/knowledge.py) travels too
    assert "Real way" in lore.message and "并发槽位数" in localize(lore.message, "zh")


def test_plan_notes_are_english_and_localize_to_chinese(chinese_locale) -> None:
    p = llamarig.plan_model(llamarig.deployment("qwen3.6-27b:iq4_nl", ["-c", "105000"], mmproj="f16",
                                                hardware=llamarig.machine([llamarig.gpu("rtx3090")])))
    assert p.notes and not any(CJK.search(n) for n in p.notes)
    assert all(CJK.search(localize(n, "zh")) for n in p.notes), [localize(n, "zh") for n in p.notes]
    assert not CJK.search(json.dumps(p.to_json(), ensure_ascii=False))


def test_an_error_is_english_and_localizes_to_chinese(chinese_locale) -> None:
    with pytest.raises(LlamarigError) as info:
        llamarig.plan_model(llamarig.deployment("no-such-model"))
    text = str(info.value)
    assert "no such file" in text and not CJK.search(text)
    assert "文件不存在" in localize(text, "zh")


def test_message_values_keep_their_parts() -> None:
    fits = _("fits")
    err = _("unknown {kind} '{name}'{hint}").format(kind=_("model"), name="x", hint="")
    assert isinstance(fits, Message) and fits == "fits" and str(fits) == "fits"
    assert err == "unknown model 'x'" and localize(err, "zh") == "未知的模型：'x'"  # a Message field too
    both = "a: " + err + "; " + fits  # + on either side stays a Message
    # a plain separator between parts ("; ") is written in the reader's language; "a: " is text
    assert both == "a: unknown model 'x'; fits" and localize(both, "zh") == "a: 未知的模型：'x'；放得下"
    assert localize(join(_("; "), [fits, err]), "zh") == "放得下；未知的模型：'x'"
    assert localize(_("; ").join([fits, err]), "zh") == "放得下；未知的模型：'x'"  # Message.join: the same
    failed = _("plan: not computed ({error})").format(error=LlamarigError(_("fits")))  # an error as a field
    assert failed == "plan: not computed (fits)" and "放得下" in localize(failed, "zh")
    assert json.dumps({"m": both}) == '{"m": "a: unknown model \'x\'; fits"}'
    for copied in (pickle.loads(pickle.dumps(both)), copy.deepcopy(both)):
        assert localize(copied, "zh") == localize(both, "zh")
    assert localize(str(ValueError(err)), "zh") == "未知的模型：'x'"  # str(error) keeps the Message
    assert localize(["x", fits, {"k": fits}], "zh") == ["x", "放得下", {"k": "放得下"}]
    assert localize(Message.given("intent", zh="意图"), "zh") == "意图"
    assert localize(Message.given("intent", zh="意图"), "en") == "intent"


def test_no_language_switch_outside_the_cli() -> None:
    """set_language / in_language / language() are the CLI's: library code takes ``lang``."""
    banned = {"set_language", "in_language", "language"}
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("cli/") or rel == "i18n.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                if name in banned:
                    bad.append(f"{rel}:{node.lineno}: {name}()")
            elif isinstance(node, ast.ImportFrom) and node.module == "llamarig.i18n":
                bad += [f"{rel}:{node.lineno}: imports {a.name}" for a in node.names if a.name in banned]
    assert bad == []


def test_the_cli_takes_its_underscore_from_cli_lang() -> None:
    """A cli/ module that imported the library's ``_`` would print English Messages to a Chinese
    reader: cli/ translates with ``llamarig.cli.lang._`` (library values it prints: ``localize``)."""
    bad = []
    for path in sorted((SRC / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "llamarig.i18n":
                bad += [f"cli/{path.name}:{node.lineno}" for a in node.names if a.name == "_"]
    assert bad == []


def test_joined_messages_keep_their_language() -> None:
    """A list of Messages joined into another (the plan's shortfalls in check's memory finding,
    the per-slot basis) reads Chinese throughout: joined with _("; "), not a plain "; "."""
    import llamarig
    from llamarig.catalogue.gpus import parse_gpu_arg
    from llamarig.i18n import localize

    rep = llamarig.check("llama-server -m qwen3.6-27b:iq4_nl -c 65536 -np 2 -ngl 99 --fit off\n",
                         gpus=[parse_gpu_arg("rtx3090:8")], cores=6)
    memory = [f for f in rep.findings if f.rule == "memory"]
    assert memory and "short by" in memory[0].message
    zh = localize(memory[0].message, "zh")
    assert "short by" not in zh and "does not fit" not in zh, zh
    rep = llamarig.check("llama-server -m qwen3.6-27b:iq4_nl -c 16384 -np 2\n", cores=6)
    slot = [f for f in rep.findings if f.rule == "per-slot-ctx"]
    assert slot and "; below 16384" in slot[0].message
    assert "; " not in localize(slot[0].message, "zh")


def test_a_list_of_like_items_takes_the_enumeration_comma() -> None:
    """Line numbers and layer kinds are listed with "、" in Chinese; "，" stays between clauses."""
    from llamarig.flags.reading import _few
    from llamarig.i18n import listing

    assert localize(listing(["3", "5", "7"]), "zh") == "3、5、7"
    assert str(listing(["3", "5", "7"])) == "3, 5, 7" == localize(listing(["3", "5", "7"]), "en")
    assert localize(_few([2, 4, 6, 8, 10, 12, 14]), "zh") == "2、4、6、8、10、…、14"
    assert localize(join(_(", "), ["a", "b"]), "zh") == "a，b"
    assert pickle.loads(pickle.dumps(listing(["1", "2"]))) == "1, 2"
