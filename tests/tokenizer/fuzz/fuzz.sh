#!/usr/bin/env bash
# Fuzzes the tokenizer loader and encode/decode with libFuzzer + ASan + UBSan
# (leak checking on) for a bounded time. Not part of `bazel test`.
#   tests/tokenizer/fuzz/fuzz.sh [SECONDS_PER_TARGET]   (default 120)
set -euo pipefail
cd "$(dirname "$0")/../../.."
seconds=${1:-120}
out=${FUZZ_OUT:-/tmp/tpserve-tokenizer-fuzz}
mkdir -p "$out/loader_corpus" "$out/codec_corpus"

srcs="$(ls server/tokenizer/*.cc | grep -v -E '_test\.cc$|_tool\.cc$|_benchmark\.cc$') base/utf8.cc"
absl_libs=$(grep -o '"-labsl_[a-z0-9_]*"' third_party/BUILD | tr -d '"' | sort -u | tr '\n' ' ')
flags="-std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I."
libs="-lpcre2-8 -licuuc -licudata $absl_libs"

for target in loader codec; do
  echo "building ${target}_fuzzer"
  clang++ $flags tests/tokenizer/fuzz/${target}_fuzzer.cc $srcs $libs -o "$out/${target}_fuzzer"
done

# Seeds: small valid tokenizer.json files of each pipeline shape.
python3 - "$out/loader_corpus" <<'PY'
import json, sys
vocab = {"a": 0, "b": 1, "ab": 2, "\u0120": 3, "<0x41>": 4, "\u2581": 5, "<unk>": 6}
base = {"version": "1.0", "added_tokens": [
    {"id": 7, "content": "<s>", "special": True, "normalized": False, "lstrip": False,
     "rstrip": False, "single_word": False},
    {"id": 8, "content": "ab c", "special": False, "normalized": True, "lstrip": True,
     "rstrip": True, "single_word": True}],
    "model": {"type": "BPE", "vocab": vocab, "merges": [["a", "b"]], "unk_token": "<unk>",
              "byte_fallback": True, "fuse_unk": True}}
shapes = {
  "bytelevel": {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}| ?\\p{L}+|\\s+(?!\\S)"},
       "behavior": "Isolated", "invert": False},
      {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]},
      "normalizer": {"type": "NFC"}, "decoder": {"type": "ByteLevel"},
      "post_processor": {"type": "TemplateProcessing", "single": [
          {"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
          "special_tokens": {"<s>": {"id": "<s>", "ids": [7], "tokens": ["<s>"]}}}},
  "sentencepiece": {"normalizer": {"type": "Sequence", "normalizers": [
      {"type": "Prepend", "prepend": "\u2581"},
      {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
      "decoder": {"type": "Sequence", "decoders": [
          {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
          {"type": "ByteFallback"}, {"type": "Fuse"},
          {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}},
  "metaspace": {"pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581",
                                  "prepend_scheme": "first", "split": True},
                "decoder": {"type": "Metaspace", "replacement": "\u2581",
                            "prepend_scheme": "always"}},
}
for name, extra in shapes.items():
    doc = dict(base, **extra)
    open(f"{sys.argv[1]}/{name}.json", "w").write(json.dumps(doc))
PY
printf '\x00Hello world 123' > "$out/codec_corpus/a"
printf '\x81<s>[INST] hi \xe4\xbd\xa0' > "$out/codec_corpus/b"

status=0
for target in loader codec; do
  echo "fuzzing ${target}_fuzzer for ${seconds}s"
  ASAN_OPTIONS=detect_leaks=1 TOKENIZER_DATA=tests/tokenizer/data \
    "$out/${target}_fuzzer" -max_total_time="$seconds" -max_len=4096 -timeout=20 \
    -print_final_stats=1 "$out/${target}_corpus" 2>"$out/${target}.log" || status=$?
  grep -E 'stat::number_of_executed_units|stat::peak_rss_mb|ERROR|SUMMARY' "$out/${target}.log" || true
  [ "$status" = 0 ] || { echo "FAIL: ${target}_fuzzer (log: $out/${target}.log)"; exit "$status"; }
done
echo "fuzz: no crash, no leak"
