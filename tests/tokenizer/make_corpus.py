#!/usr/bin/env python3
"""Writes tests/tokenizer/corpus.jsonl: hard strings for tokenizer equality tests.

One JSON string per line. Deterministic (fixed seed), so rerunning gives the same file.
"""
import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))

HAND = [
    "", " ", "  ", "\t", "\n", "\r\n", " \n ", "a", "Hello world", " Hello world",
    "Hello  world", "Hello   world  ", "hello\tworld\t\ttabs", "line1\nline2\n\nline4\r\nend",
    "   leading spaces", "trailing spaces   ", "\n\n\n", " \t \n \r ",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure you've heard they'll say we'd've DON'T it's I'M YOU'RE",
    "12345678901234567890", "3.14159 2,718 1e-10 0x1F 1_000_000", "year 2024, room 101",
    "١٢٣٤٥ ٦٧٨٩ Arabic-Indic digits", "Ⅻ ½ ² ③ fullwidth ０１２３",
    "Grüße aus München! Ça va? Ñandú, façade, naïve, coöperate",
    "Привет, мир! Съешь же ещё этих мягких французских булок.",
    "Γειά σου Κόσμε· ἀρχὴ ἥμισυ παντός",
    "日本語のテキストです。東京は大きい。", "中文分词测试：我爱北京天安门！",
    "한국어 텍스트 처리 테스트입니다", "ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "हिन्दी में लिखा गया पाठ", "বাংলা ভাষা", "தமிழ் மொழி",
    "مرحبا بالعالم، هذا نص عربي", "שלום עולם, זה טקסט בעברית",
    "mixed RTL: abc مرحبا def שלום 123",
    "e\u0301 vs \u00e9, A\u030a vs \u00c5, n\u0303",
    "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dA\u036b\u0357\u0334\u0362\u0335\u031c\u0330\u0354L\u0368\u0367\u0369\u0358\u0320G\u0311\u0357\u030e\u0305\u035b\u0341\u0334\u033b\u0348\u034d\u0354\u0339O\u0342\u030c\u030c\u0358\u0328\u0335\u0339\u033b\u031d\u0333",
    "\u1100\u1161\u11a8 decomposed hangul", "\uac00\u11a8 mixed hangul jamo",
    "ﬁ ﬂ ligatures, ＡＢＣ fullwidth, ㍿ squared",
    "emoji 😀😃😄 🎉 and flags 🇺🇸🇯🇵🇫🇷",
    "ZWJ 👨‍👩‍👧‍👦 family, 👩🏽‍💻 coder, 🏳️‍🌈 flag",
    "skin tones 👋🏻👋🏼👋🏽👋🏾👋🏿 and keycap 1️⃣ #️⃣",
    "zero\u200bwidth\u200cjoiner\u200dtext\ufeffbom", "nbsp\u00a0here\u2003em\u3000ideographic",
    "nel\u0085line\u2028sep\u2029para\x0bvt\x0cff", "control \x01\x02\x7f chars",
    "private use \ue000\uf8ff and noncharacter \ufdd0 \U0010fffd",
    "musical 𝄞 math 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ancient 𓀀𓀁",
    "def foo(x):\n    return x ** 2  # square\n",
    "int main() {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}",
    "for (let i = 0; i < arr.length; i++) { sum += arr[i]; }",
    "SELECT * FROM users WHERE id = 1 AND name LIKE '%bob%';",
    "<html><body class=\"x\">&amp; &lt;tag&gt;</body></html>",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}",
    "https://example.com/path?query=1&other=two#frag user@example.org",
    "        indented code\n            more indent\n\t\tmixed tabs",
    "!!!???...,,,;;;:::---___===+++***&&&%%%$$$###@@@",
    "'''\"\"\"```~~~^^^|||\\\\\\///",
    "<s>", "</s>", "<unk>", "<s> hello </s>", "<s>hello</s>", "a<s>b", "<<s>>", "< s >",
    "<|endoftext|>", "<|endoftext|><|endoftext|>", "text<|endoftext|>more", "<|endoftext",
    "|endoftext|>", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|> spaced <|im_end|>", "<|im", "<|im_sta", "<tool_call>{}</tool_call>",
    "<|begin_of_text|>Hello<|eot_id|>", "<|start_header_id|>system<|end_header_id|>\n\nHi",
    "<|reserved_special_token_5|> <|reserved_special_token_250|>",
    "[INST] What is 2+2? [/INST]", "[INST]no spaces[/INST]", "[TOOL_CALLS] [control_8] [IMG]",
    "[/INST", "INST]", "[REFERENCE_DOC_0]x", "[control_999]",
    "x <mask> y", "x<mask>y", "   <mask>   end", "<mask><mask>", "<MASK> <mas k>",
    "ZZword alone", "aZZword inside", "ZZwordy", "_ZZword", "ZZword.", "(ZZword)",
    "Café au lait", "Cafe\u0301 decomposed", "CAFÉ", "  tab\tafter", "x  tab\ty",
    "<|im_start|><|im", "a\u2581b \u2581\u2581 metaspace char", "▁leading",
    "<0x41> <0xFF> byte tokens as text", "<0x0A>",
    "a" * 300, "ab" * 200, "Supercalifragilisticexpialidocious" * 8,
    "pneumonoultramicroscopicsilicovolcanoconiosis", "x" * 1000 + " y",
    "1" * 200, "!" * 150, " " * 100, "\n" * 50 + "x", "\t" * 40, "😀" * 60,
    "日本" * 150, "Ё" * 100, "aé" * 120,
]


def random_strings(rng, n):
    pools = [
        "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "0123456789 .,;:!?'\"()[]{}<>-_=+*/\\|@#$%^&~`",
        " \t\n\r\u00a0\u3000",
        "éèêëàâäôöûüçñßøåæœ",
        "абвгдеёжзийклмнопрстуфхцчшщъыьэюя",
        "的一是不了人我在有他这为之大来以个中上们",
        "あいうえおかきくけこアイウエオ",
        "ابتثجحخدذرزسشصضطظعغفقكلمنهوي",
        "😀🎉👍🏽\u200d❤️🇫🇷",
        "\u0301\u0308\u0327\u0303",
        "▁",
    ]
    out = []
    for _ in range(n):
        k = rng.randint(1, 60)
        s = "".join(rng.choice(rng.choice(pools)) for _ in range(k))
        out.append(s)
    return out


def main():
    rng = random.Random(1234)
    lines = HAND + random_strings(rng, 150)
    with open(os.path.join(HERE, "corpus.jsonl"), "w", encoding="utf-8") as f:
        for s in lines:
            f.write(json.dumps(s, ensure_ascii=False) + "\n")
    print(len(lines), "strings")


if __name__ == "__main__":
    main()
