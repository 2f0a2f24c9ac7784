"""Issue 33: the one line-breaking rule (llamarig.text) and the one table-or-blocks layout
(cli/layout.Sheet) every view is built on: nothing wider than the terminal, no word cut."""

from __future__ import annotations

import re

import pytest
from rich.console import Console

from llamarig.cli.layout import Column, Para, Sheet
from llamarig.text import cells, command_lines, shorten_middle, wrap

ZH = "每个槽位的上下文是 8192 token；KV 缓存 4.00 GiB，放在 CUDA0 上。`--cache-type-k q8_0` 需要 Flash Attention。"
EN = ("the command is cut off at line 12: the 3 flag(s) marked (not passed) never reach llama-server "
      "(as `llamarig check` reports)")


@pytest.mark.parametrize("width", [20, 33, 40, 61, 80])
@pytest.mark.parametrize("text", [ZH, EN])
def test_wrap_fits_and_keeps_words(text: str, width: int) -> None:
    lines = wrap(text, width, indent="  ")
    assert all(cells(ln) <= width for ln in lines), lines
    # every English word, flag and number is on one line, whole
    words = set(re.findall(r"[A-Za-z0-9_.()-]{2,}", text))
    assert words <= set(re.findall(r"[A-Za-z0-9_.()-]{2,}", "\n".join(lines)))
    assert re.sub(r"\s+", "", "".join(lines)) == re.sub(r"\s+", "", text)


def test_no_line_starts_with_a_closing_mark() -> None:
    for width in range(12, 60):
        for ln in wrap(ZH, width):
            assert ln[:1] not in "，。；：）”", (width, ln)


def test_a_number_keeps_its_unit() -> None:
    text = "weights 2.25 MiB, KV cache 2.00 MiB, compute buffer 15.53 MiB, other 300.00 MiB; total 319.79 MiB"
    for width in range(14, 70):
        joined = "\n".join(wrap(text, width))
        assert re.search(r"\d\n", joined) is None, (width, joined)


def test_a_long_path_stays_whole_on_its_line() -> None:
    url = "https://developers.cloudflare.com/workers-ai/models/qwen2.5-coder-32b-instruct"
    lines = wrap(f"上下文窗口见 {url} 和 Xinference 的文档", 80, indent="        ")
    assert url in lines  # alone, without the indent it would not fit with
    assert all(cells(ln) <= 80 for ln in lines)


def test_a_long_code_span_breaks_at_its_blanks() -> None:
    cmd = "`llama-server -m MODEL.gguf -ngl all -sm layer -ts 22,22,20 -np 8 -c 32768 -kvu`"
    lines = wrap("对应的 llama-server 命令：" + cmd, 44)
    assert all(cells(ln) <= 44 for ln in lines)
    assert all(not ln.endswith("-") for ln in lines), lines  # never "-" / "sm layer"


def test_command_lines_continue_with_a_backslash() -> None:
    line = "    llama-server -m /models/Qwen3.6-27B-IQ4_NL.gguf -c 105000 -np 1 -ctk q4_0 -ctv q4_0 --mmproj f16"
    out = command_lines(line, 60)
    assert all(cells(ln) <= 60 for ln in out) and all(ln.endswith(" \\") for ln in out[:-1])
    assert "-c 105000" in "\n".join(out)  # a flag keeps its value


def test_shorten_middle_keeps_the_file_name() -> None:
    p = "/data/models/unsloth/Qwen3.6-27B-GGUF/snapshots/abc/Qwen3.6-27B-IQ4_NL.gguf"
    short = shorten_middle(p, 40)
    assert cells(short) <= 40 and short.endswith("/Qwen3.6-27B-IQ4_NL.gguf") and "…" in short


def _sheet(n: int) -> Sheet:
    sheet = Sheet([Column("flag", key=True), Column("value", key=True, path=True, min_width=20),
                   Column("what it does", prose=True, min_width=24, ratio=3),
                   Column("effect", prose=True, min_width=16, ratio=2)], title="line 3: llama-server")
    for i in range(n):
        sheet.add_row(f"--flag-{i}", "/data/models/a/very/long/path/to/Qwen3.6-27B-IQ4_NL.gguf",
                      "size of the prompt context (default: 0, 0 = loaded from model) " * (i % 3 + 1), ZH)
    return sheet


@pytest.mark.parametrize("width", [40, 60, 80, 100, 120, 160])
def test_sheet_fits_every_width(width: int) -> None:
    lines = _sheet(4).lines(width)
    assert all(cells(ln.plain) <= width for ln in lines), [ln.plain for ln in lines if cells(ln.plain) > width]


def test_sheet_stacks_below_readable_columns() -> None:
    narrow = [ln.plain for ln in _sheet(2).lines(60)]
    wide = [ln.plain for ln in _sheet(2).lines(160)]
    assert not any(ln.startswith("flag") for ln in narrow)  # blocks: no header row
    assert wide[1].startswith("flag")  # a table under its title
    # a block per flag, its lines labelled
    assert any(ln.startswith("--flag-0") for ln in narrow) and any("what it does" in ln for ln in narrow)


def test_prose_columns_share_the_room_within_the_width() -> None:
    """A short prose column settles at its text, a long one at its minimum: never more than
    the terminal (a GPU table at 120 columns once came out 126 wide and was cut)."""
    sheet = Sheet([Column("id", key=True), Column("name", key=True, prose=True, min_width=12),
                   Column("memory", justify="right"), Column("source", prose=True, min_width=30)])
    sheet.add_row("p100", "Tesla P100 16GB (PCIe)", "16 GiB", "https://images.nvidia.com/content/tesla/pdf/"
                  "nvidia-tesla-p100-PCIe-datasheet.pdf " + "NVIDIA Tesla P100 数据手册（PCIe 16 GB HBM2）" * 8)
    for width in range(70, 130, 7):
        ws = sheet.widths(width)
        assert ws is None or sum(ws) + sheet.gap * 3 <= width, (width, ws)


def test_para_wraps_at_the_console_width() -> None:
    con = Console(width=50, record=True, file=open("/dev/null", "w"), highlight=False)  # noqa: SIM115
    con.print(Para.of(ZH + ZH))
    text = con.export_text()
    assert all(cells(ln) <= 50 for ln in text.splitlines()) and len(text.splitlines()) > 2


@pytest.mark.parametrize(("template", "fields", "want"), [
    ("{what}为 {value}", {"what": "KV 缓存 K / V", "value": "f16 / f16"}, "KV 缓存 K / V 为 f16 / f16"),
    ("{what}由 {runs} 改为 {meant}", {"what": "槽位数（-np）", "runs": "4（统一 KV）", "meant": "1"},
     "槽位数（-np）由 4（统一 KV）改为 1"),
    ("第 {line} 行：{rate:.1f} tok/s", {"line": 3, "rate": 2.345}, "第 3 行：2.3 tok/s"),
    ("{name}的上下文", {"name": "qwen3"}, "qwen3 的上下文"),
])
def test_chinese_seams_follow_the_glossary(template: str, fields: dict, want: str) -> None:
    """A value next to Chinese text: a blank before Latin letters and digits, none next to
    full-width punctuation (docs/zh/glossary.md, 写法)."""
    from llamarig.i18n import fill

    assert fill(template, "zh", (), fields) == want
    assert fill(template, "en", (), fields) == template.format(**fields)
