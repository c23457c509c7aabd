#!/usr/bin/env python3
"""Oracle: records what Hugging Face tokenizers does on the committed corpus.

For every tokenizer under tests/tokenizer/data/NAME/ writes NAME/expected.jsonl with
one object per corpus line:
  text          the input
  ids           encode(text, add_special_tokens=False)
  ids_special   encode(text, add_special_tokens=True)
  decoded       decode(ids, skip_special_tokens=False)
  decoded_special       decode(ids_special, skip_special_tokens=False)
  decoded_special_skip  decode(ids_special, skip_special_tokens=True)
and NAME/decode.jsonl with random id sequences (bytes tokens, specials, pieces in odd
order) and their decodes, with and without skip_special_tokens.

Run inside the oracle venv: python3 tests/tokenizer/make_fixtures.py
"""
import json
import os
import random

from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")


def corpus():
    with open(os.path.join(HERE, "corpus.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def random_id_sequences(tok, rng, n):
    size = tok.get_vocab_size(with_added_tokens=True)
    added = list(tok.get_added_tokens_decoder().keys())
    byte_ids = [i for i in (tok.token_to_id("<0x%02X>" % b) for b in range(256)) if i is not None]
    rows = []
    for _ in range(n):
        ids = []
        for _ in range(rng.randint(0, 24)):
            r = rng.random()
            if r < 0.15 and added:
                ids.append(rng.choice(added))
            elif r < 0.45 and byte_ids:
                ids.append(rng.choice(byte_ids))
            else:
                ids.append(rng.randrange(size))
        rows.append({"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False),
                     "decoded_skip": tok.decode(ids, skip_special_tokens=True)})
    return rows


def main():
    texts = corpus()
    for name in sorted(os.listdir(DATA)):
        path = os.path.join(DATA, name, "tokenizer.json")
        if not os.path.exists(path):
            continue
        tok = Tokenizer.from_file(path)
        rows = []
        for text in texts:
            ids = tok.encode(text, add_special_tokens=False).ids
            ids_special = tok.encode(text, add_special_tokens=True).ids
            rows.append({
                "text": text, "ids": ids, "ids_special": ids_special,
                "decoded": tok.decode(ids, skip_special_tokens=False),
                "decoded_special": tok.decode(ids_special, skip_special_tokens=False),
                "decoded_special_skip": tok.decode(ids_special, skip_special_tokens=True),
            })
        write_jsonl(os.path.join(DATA, name, "expected.jsonl"), rows)
        write_jsonl(os.path.join(DATA, name, "decode.jsonl"),
                    random_id_sequences(tok, random.Random(name), 200))
        print(name, len(rows), "rows")


if __name__ == "__main__":
    main()
