"""Writes sharegpt_synthetic.json: a small ShareGPT-format dataset for tpserve-cli bench
(--dataset-name sharegpt --dataset-path ...), of made-up conversations in plain English
words (no real chat logs), fixed by the seed so the committed file can be remade.

ShareGPT's layout: a JSON list of {"id": ..., "conversations": [{"from": "human"|"gpt",
"value": text}, ...]}; a few conversations have one turn (bench skips them) and some have
more than two (bench reads the first two).

    python3 tests/data/bench/make_sharegpt.py > tests/data/bench/sharegpt_synthetic.json
"""
import json
import random

WORDS = ("the of and to in is you that it he was for on are as with his they at be this "
         "have from or one had by word but not what all were we when your can said there use "
         "an each which she do how their if will up other about out many then them these so "
         "some her would make like him into time has look two more write go see number no way "
         "could people my than first water been call who oil its now find long down day did get "
         "come made may part over new sound take only little work know place year live me back "
         "give most very after thing our just name good sentence man think say great where help "
         "through much before line right too mean old any same tell boy follow came want show "
         "also around form three small set put end does another well large must big even such "
         "because turn here why ask went men read need land different home us move try kind hand "
         "picture again change off play spell air away animal house point page letter mother "
         "answer found study still learn should America world").split()
QUESTIONS = ["How do I", "Can you explain why", "Write a short note about", "What is the best way to",
             "Summarize", "Tell me a story where", "List three reasons"]


def sentence(rng, low, high):
    words = [rng.choice(WORDS) for _ in range(rng.randint(low, high))]
    return " ".join(words).capitalize() + "."


def text(rng, sentences, low=4, high=16):
    return " ".join(sentence(rng, low, high) for _ in range(sentences))


def main():
    rng = random.Random(20261203)
    data = []
    for i in range(120):
        turns = 1 if i % 20 == 7 else rng.choice([2, 2, 2, 4])
        conversation = []
        for t in range(turns):
            if t % 2 == 0:
                value = rng.choice(QUESTIONS) + " " + text(rng, rng.randint(1, 12))
                conversation.append({"from": "human", "value": value})
            else:
                conversation.append({"from": "gpt", "value": text(rng, rng.randint(1, 20))})
        data.append({"id": "synthetic-%03d" % i, "conversations": conversation})
    print(json.dumps(data, indent=1))


if __name__ == "__main__":
    main()
