#!/usr/bin/env bash
# tokenize_tool: JSON Lines in, one line out per line in order, errors per line.
set -euo pipefail
tool=server/tokenizer/tokenize_tool
dir=tests/tokenizer/data/qwen2

fail() { echo "FAIL: $*" >&2; exit 1; }

out=$(printf '%s\n' '"Hello world"' '42' 'not json' '"<|im_start|>hi"' |
      "$tool" --tokenizer "$dir" --encode)
expected='[9707,1879]
{"error":"expected a JSON string"}
{"error":"line is not valid JSON"}
[151644,6023]'
[ "$out" = "$expected" ] || fail "encode: got $out"

# An id the vocabulary lacks decodes to nothing, as in Hugging Face; a negative one is an error.
out=$(printf '%s\n' '[9707,1879]' '[999999999]' '[-1]' '"x"' '[151644,6023]' |
      "$tool" --tokenizer "$dir/tokenizer.json" --decode --skip-special-tokens)
echo "$out" | sed -n 1p | grep -qx '"Hello world"' || fail "decode line 1: $out"
echo "$out" | sed -n 2p | grep -qx '""' || fail "decode line 2: $out"
echo "$out" | sed -n 3p | grep -q '"error":"token id -1 is negative' || fail "decode line 3: $out"
echo "$out" | sed -n 4p | grep -q '"error"' || fail "decode line 4: $out"
echo "$out" | sed -n 5p | grep -qx '"hi"' || fail "decode line 5: $out"

out=$(printf '"Hi"\n' | "$tool" --tokenizer tests/tokenizer/data/mistral --encode --add-special-tokens)
[ "$out" = "[1,15359]" ] || fail "add-special-tokens: got $out"

if "$tool" --tokenizer /nonexistent --encode </dev/null 2>/dev/null; then fail "missing file accepted"; fi
if "$tool" --encode --decode --tokenizer "$dir" </dev/null 2>/dev/null; then fail "bad flags accepted"; fi
echo "1 passed, 0 failed"
